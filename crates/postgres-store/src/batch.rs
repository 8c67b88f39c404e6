//! Batching: reservations (and completions) that arrive while others are on their way to the
//! database go together, as one statement over arrays, in the next round trip.
//!
//! Each statement is a transaction, and each commit waits for its WAL flush
//! (`synchronous_commit`), so a keyed first request costs two commits unbatched. One statement
//! for many requests makes that one commit and one round trip for all of them, and spares the
//! database a parse, plan and executor start per request. Nothing waits to fill a batch: a
//! request goes at once when a slot is free, and only requests that arrive while every slot is
//! busy are gathered, so under light load a batch is one request, as fast as the statement
//! alone. Each request of a batch is still atomic on its own (`statements.rs` says how the
//! array forms keep every rule of the single ones); a key that appears twice in one batch is
//! left out of it and runs on its own, as one statement may not change a row twice.

use std::future::Future;
use std::sync::Arc;

use idempotency_core::StoreError;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// The most requests one statement carries.
pub(crate) const MAX_BATCH: usize = 64;

/// A request waiting for its batch, and where its answer goes.
type Waiting<Q, A> = (Q, oneshot::Sender<Result<A, StoreError>>);

/// Gathers requests of one kind and runs them in batches, at most `slots` batches at once.
pub(crate) struct Batcher<Q, A> {
    queue: mpsc::UnboundedSender<Waiting<Q, A>>,
}

impl<Q: Send + 'static, A: Send + 'static> Batcher<Q, A> {
    /// Starts the gathering task; `run` runs one batch and answers each of its requests, in
    /// order.
    pub(crate) fn start<F, Fut>(slots: usize, run: F) -> Self
    where
        F: Fn(Vec<Q>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<A, StoreError>>> + Send + 'static,
    {
        let (queue, mut waiting) = mpsc::unbounded_channel::<Waiting<Q, A>>();
        let run = Arc::new(run);
        let slots = Arc::new(Semaphore::new(slots.max(1)));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let Some(first) = waiting.recv().await else {
                    return;
                };
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match waiting.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                let run = run.clone();
                tokio::spawn(async move {
                    let (requests, answers): (Vec<Q>, Vec<_>) = batch.into_iter().unzip();
                    let results = run(requests).await;
                    for (answer, result) in answers.into_iter().zip(results) {
                        let _ = answer.send(result);
                    }
                    drop(slot);
                });
            }
        });
        Self { queue }
    }

    /// Hands `request` to the next batch and waits for its answer.
    pub(crate) async fn submit(&self, request: Q) -> Result<A, StoreError> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send((request, answer))
            .map_err(|_| StoreError::unavailable("the store is closed"))?;
        answered
            .await
            .unwrap_or_else(|_| Err(StoreError::unavailable("a batch was dropped")))
    }
}
