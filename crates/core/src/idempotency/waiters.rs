//! Waking duplicates that wait (`concurrent = "wait"`) when the first request with their key
//! finishes in this process.
//!
//! Duplicates still poll the store with a bounded back-off, because the first request may run
//! on another replica; when it runs here, they are woken at once instead of at their next poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Storage keys that duplicates are waiting on.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Waiters {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        // Every change is one insert or remove, so a poisoned map is still consistent.
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The signal for `key`; enable a `notified()` future on it before checking the store, so a
    /// finish between the check and the wait is not missed.
    pub(super) fn subscribe(&self, key: &str) -> Arc<Notify> {
        self.map().entry(key.to_owned()).or_default().clone()
    }

    /// Forgets `key` once its last waiter has given up, so the map does not grow.
    pub(super) fn unsubscribe(&self, key: &str, notify: Arc<Notify>) {
        let mut map = self.map();
        drop(notify);
        if map.get(key).is_some_and(|n| Arc::strong_count(n) == 1) {
            map.remove(key);
        }
    }

    /// The first request with `key` has finished: wake everyone waiting on it.
    pub(super) fn finished(&self, key: &str) {
        if let Some(notify) = self.map().remove(key) {
            notify.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_finish_wakes_a_subscribed_waiter_at_once() {
        let waiters = Arc::new(Waiters::default());
        let notify = waiters.subscribe("k");
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        waiters.finished("k");
        tokio::time::timeout(Duration::from_secs(1), notified)
            .await
            .expect("woken");
    }

    #[test]
    fn the_map_empties_when_waiters_leave() {
        let waiters = Waiters::default();
        let a = waiters.subscribe("k");
        let b = waiters.subscribe("k");
        waiters.unsubscribe("k", a);
        assert_eq!(waiters.map().len(), 1);
        waiters.unsubscribe("k", b);
        assert!(waiters.map().is_empty());
    }
}
