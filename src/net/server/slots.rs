//! Connection slots: at most `max_connections` clients served at once by the whole process,
//! whichever worker serves them, a limit a reload may raise or lower while connections are
//! open.
//!
//! Each worker has a listen queue of its own (`SO_REUSEPORT`), and the kernel chooses the queue
//! a client lands in. A worker that took a slot before a client came would keep it while
//! clients wait in another worker's queue: with several workers, fewer than `max_connections`
//! would be served, and a client would wait for connections that have nothing to do with it.
//! So a worker takes a client off its queue first and then waits for a slot for it; the client
//! sees what it would see in the queue, a connection not answered yet. Each worker holds at
//! most one such client, and the rest stay in the queues, where they cost nothing.
//!
//! A semaphore would fix the count at start; here a worker compares the connections open with
//! the limit in force, in one atomic step, as workers take slots from several threads. A
//! lowered limit takes effect as connections close: none is cut to meet it.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::live::LiveApp;

/// The target of this module's log lines, kept fixed: `RUST_LOG` directives name it
/// (docs/reference.md#logs), and a move of the file must not change what they select.
const LOG_TARGET: &str = "idempotency_proxy::server::slots";

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
    /// Waits for a client on `listener`, then for a slot to serve it with.
    pub(super) async fn admit(
        self: &Arc<Self>,
        listener: &TcpListener,
        live: &LiveApp,
    ) -> io::Result<(TcpStream, SocketAddr, Slot)> {
        let (stream, peer) = listener.accept().await?;
        Ok((stream, peer, self.acquire(live, peer).await))
    }

    /// Waits until fewer connections are open than the limit in force, then takes a slot for
    /// the client at `peer`.
    async fn acquire(self: &Arc<Self>, live: &LiveApp, peer: SocketAddr) -> Slot {
        loop {
            let (freed, replaced) = (self.freed.notified(), live.replaced());
            tokio::pin!(freed, replaced);
            // Registered before the check, so a slot freed (or a limit raised) between the two
            // is not missed.
            freed.as_mut().enable();
            replaced.as_mut().enable();
            let limit = live.current().limits.max_connections.max(1);
            match self.take_below(limit) {
                Ok(()) => return Slot(self.clone()),
                // At every refused look, also after a close or a reload: the line says the
                // limit in force was looked at, and held the client back.
                Err(open) => tracing::debug!(
                    target: LOG_TARGET,
                    open,
                    max_connections = limit,
                    %peer,
                    "connection limit reached; a client waits for a slot"
                ),
            }
            tokio::select! {
                () = freed => {}
                () = replaced => {}
            }
        }
    }

    /// Counts one more connection if fewer than `limit` are open; else how many are.
    fn take_below(&self, limit: usize) -> Result<(), usize> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < limit).then_some(open + 1)
            })
            .map(drop)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        // One waiting worker is enough: a slot admits one client. A worker woken and then
        // cancelled passes the wake-up on to the next.
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_more_are_taken_than_the_limit_even_from_many_threads() {
        let slots = Arc::new(Slots::default());
        let taken: usize = std::thread::scope(|scope| {
            let takers: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| (0..1000).filter(|_| slots.take_below(100).is_ok()).count())
                })
                .collect();
            takers.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(taken, 100);
        assert_eq!(slots.open.load(Ordering::SeqCst), 100);
    }
}
