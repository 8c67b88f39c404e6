//! Running a first request in the task of the request that made it, and moving it to a task of
//! its own only if that request goes away first.
//!
//! The upstream call must run to its end and its outcome be recorded even when the client hangs
//! up, or the client's retry would find the key in flight, or run the operation twice. Spawning
//! a task for every first request guarantees that, at the price of a hand-over between tasks
//! (and usually threads) per request. Polling it where it is, and spawning only from `Drop`,
//! costs nothing on the usual path and keeps the guarantee on the other.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::task::task_tracker::TrackedFuture;
use tokio_util::task::TaskTracker;

/// A future run in place, and finished in a task of its own if dropped before its end.
pub(super) struct Detachable<F: Future<Output: Send + 'static> + Send + 'static> {
    work: Option<Pin<Box<TrackedFuture<F>>>>,
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Detachable<F> {
    /// `work`, counted by `tracker` until it ends, wherever it runs, so a shutdown can wait
    /// for it.
    pub(super) fn new(work: F, tracker: &TaskTracker) -> Self {
        Self {
            work: Some(Box::pin(tracker.track_future(work))),
        }
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Future for Detachable<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let work = self.work.as_mut().expect("polled after completion");
        let output = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(output)
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Drop for Detachable<F> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        // Outside a runtime (it is shutting down) there is nowhere to finish: the record stays
        // in flight and frees when its lease runs out.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(work);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn work_runs_in_place_and_is_counted_while_it_runs() {
        let tracker = TaskTracker::new();
        let (go, wait) = oneshot::channel::<u32>();
        let work = Detachable::new(async move { wait.await.unwrap() + 1 }, &tracker);
        assert_eq!(tracker.len(), 1);
        go.send(41).unwrap();
        assert_eq!(work.await, 42);
        assert_eq!(tracker.len(), 0);
    }

    #[tokio::test]
    async fn work_dropped_before_its_end_finishes_in_a_task_of_its_own() {
        let tracker = TaskTracker::new();
        let finished = Arc::new(AtomicBool::new(false));
        let (go, wait) = oneshot::channel::<()>();
        let done = finished.clone();
        let work = Detachable::new(
            async move {
                wait.await.unwrap();
                done.store(true, Ordering::SeqCst);
            },
            &tracker,
        );
        let mut work = Box::pin(work);
        assert!(futures_poll_once(work.as_mut()).is_pending());
        drop(work);
        go.send(()).unwrap();
        tracker.close();
        tracker.wait().await;
        assert!(
            finished.load(Ordering::SeqCst),
            "the dropped work ran to its end"
        );
    }

    fn futures_poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        let waker = std::task::Waker::noop();
        future.poll(&mut Context::from_waker(waker))
    }
}
