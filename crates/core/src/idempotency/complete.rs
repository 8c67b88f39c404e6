//! The end of step 5 (docs/reference.md#the-life-of-a-request): what the store keeps of the first request's answer, and
//! storing it, or freeing the key, under the reservation the request holds.
//!
//! An outcome that is not stored is the one way an operation could run twice: the key frees
//! when its lease runs out, and the client's retry runs it again. So storing is tried for as
//! long as the store might come back ([`PATIENCE`]), and an outcome whose lease ran out before
//! it reached the store (the store stalled, or this process was paused) is still kept when
//! nobody has taken the key since. A record another request made always stands.

use crate::error::ErrorChain;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use super::context::Context;
use crate::headers::storable_response_headers;
use crate::model::{CompletedRecord, FencingToken, Fingerprint, Record, ScopedKey, StoredBody};
use crate::store::{Fenced, Reservation};

/// How long storing an outcome is retried while the store cannot be reached. The operation has
/// run; a late completion never overwrites another request's record, so trying longer costs
/// only the client's wait for its answer during an outage.
const PATIENCE: Duration = Duration::from_secs(10);
/// The pause between two tries, doubling up to the maximum.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A reservation a request holds: its key, the token it holds it by, what the request asked.
pub(super) struct Held {
    pub(super) key: ScopedKey,
    pub(super) token: FencingToken,
    pub(super) fingerprint: Fingerprint,
}

impl Held {
    /// What the store keeps of an answer: its status, its storable headers, and `body`.
    pub(super) fn record(
        &self,
        ctx: &Context,
        status: StatusCode,
        headers: &HeaderMap,
        body: StoredBody,
    ) -> CompletedRecord {
        let exclude = &ctx.policy.replay_exclude_headers;
        let record = CompletedRecord {
            fingerprint: self.fingerprint,
            token: self.token,
            created_at: SystemTime::now(),
            status,
            headers: storable_response_headers(headers, exclude),
            body,
        };
        // Kept in memory for a while (memory store, replay cache): it must not pin the read buffer.
        record.detached()
    }

    /// Stores the outcome, retrying store errors for up to [`PATIENCE`].
    pub(super) async fn complete(&self, ctx: &Context, record: CompletedRecord) {
        let deadline = Instant::now() + PATIENCE;
        let mut pause = FIRST_PAUSE;
        for attempt in 0u32.. {
            let started = Instant::now();
            let stored = ctx.store.complete(&self.key, &record, ctx.policy.ttl).await;
            ctx.metrics.completed(started.elapsed());
            match stored {
                Ok(Fenced::Applied) => return,
                // A try that timed out may still have been applied: then the record is ours.
                Ok(Fenced::LeaseLost) if attempt > 0 && self.stored_by_us(ctx).await => return,
                Ok(Fenced::LeaseLost) => return self.complete_after_the_lease(ctx, record).await,
                Err(e) => {
                    tracing::warn!(key = %self.key.log_id(), attempt, error = %ErrorChain(&e), "storing the outcome failed");
                    if Instant::now() + pause >= deadline {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
        tracing::error!(key = %self.key.log_id(), "outcome not stored; the key frees when its lease runs out");
    }

    /// The lease ran out before the outcome reached the store. The operation has run all the
    /// same, and the client is about to get its answer; so if nobody has taken the key since,
    /// the outcome is kept under a fresh reservation, and a retry replays it instead of running
    /// the operation again.
    async fn complete_after_the_lease(&self, ctx: &Context, mut record: CompletedRecord) {
        let log_id = self.key.log_id();
        let reserved = ctx
            .store
            .reserve(&self.key, self.fingerprint, ctx.policy.lease);
        record.token = match reserved.await {
            Ok(Reservation::Acquired(token)) => token,
            Ok(Reservation::Completed(r)) if r.token == self.token => return,
            Ok(_) => {
                tracing::warn!(key = %log_id, "outcome not stored: the lease ran out and the key was taken over");
                return;
            }
            Err(e) => {
                tracing::error!(key = %log_id, error = %ErrorChain(&e), "outcome not stored: the lease ran out and the store cannot be reached");
                return;
            }
        };
        match ctx.store.complete(&self.key, &record, ctx.policy.ttl).await {
            Ok(Fenced::Applied) => {
                tracing::warn!(key = %log_id, "the lease ran out before the outcome was stored; stored under a fresh reservation");
            }
            Ok(Fenced::LeaseLost) => {
                tracing::warn!(key = %log_id, "outcome not stored: the fresh reservation ran out too");
            }
            Err(e) => {
                tracing::error!(key = %log_id, error = %ErrorChain(&e), "outcome not stored; the key frees when its lease runs out");
            }
        }
    }

    async fn stored_by_us(&self, ctx: &Context) -> bool {
        let current = ctx.store.get(&self.key).await;
        matches!(current, Ok(Some((Record::Completed(r), _))) if r.token == self.token)
    }

    /// Frees the key, so a retry runs the operation again.
    pub(super) async fn release(&self, ctx: &Context) {
        if let Err(e) = ctx.store.release(&self.key, self.token).await {
            tracing::warn!(key = %self.key.log_id(), error = %ErrorChain(&e), "releasing the key failed; it frees when its lease runs out");
        }
    }
}
