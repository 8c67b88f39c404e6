//! Connection slots: at most `max_connections` clients served at once, a limit a reload may
//! raise or lower while connections are open.
//!
//! A semaphore would fix the count at start; here the accept loop (the only one taking slots)
//! compares the connections open with the limit in force each time it wants one. A lowered
//! limit takes effect as connections close: none is cut to meet it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::live::LiveApp;

/// The connections being served, and a signal when one ends.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    open: AtomicUsize,
    freed: Notify,
}

/// One connection's slot, given back when dropped.
#[derive(Debug)]
pub(super) struct Slot(Arc<Slots>);

impl Slots {
    /// Waits until fewer connections are open than the limit in force, then takes a slot.
    /// Waiting here, before accepting, leaves further clients in the listen backlog, where they
    /// cost nothing, instead of accepting and dropping them.
    pub(super) async fn acquire(self: &Arc<Self>, live: &LiveApp) -> Slot {
        loop {
            let (freed, replaced) = (self.freed.notified(), live.replaced());
            tokio::pin!(freed, replaced);
            // Registered before the check, so a slot freed (or a limit raised) between the two
            // is not missed.
            freed.as_mut().enable();
            replaced.as_mut().enable();
            let limit = live.current().limits.max_connections.max(1);
            if self.open.load(Ordering::SeqCst) < limit {
                self.open.fetch_add(1, Ordering::SeqCst);
                return Slot(self.clone());
            }
            tokio::select! {
                () = freed => {}
                () = replaced => {}
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.freed.notify_one();
    }
}
