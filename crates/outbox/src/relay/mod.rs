//! The relay: delivers an outbox's committed rows, each at least once, until it is drained.
//!
//! Its tasks, and why each is on its own:
//! - the claim loop (`claim.rs`) claims due rows with a lease, in one short transaction per
//!   batch, never more rows than there are free slots (`deliver_concurrency`): a claimed row
//!   that waited for a slot could outlive its lease and be sent twice. Each destination has a
//!   share of the slots (`destination_concurrency`, `rooms.rs`), and the rows of a destination
//!   whose share is taken are not claimed. It claims again at once while batches come back
//!   full, on a `NOTIFY`, on a freed slot, and every `poll_interval`;
//! - each attempt (`attempt.rs`) runs in a task of its own, outside any transaction, publishes
//!   through its topic's destination, and hands its outcome to the marker;
//! - the marker (`marks.rs`) writes the outcomes of every attempt that ended meanwhile in one
//!   statement, fenced by the claim, and keeps trying through a database outage;
//! - the listener (`listen.rs`) holds the `LISTEN` connection and wakes the claim loop;
//! - the purge (`purge.rs`) deletes delivered rows older than `keep_delivered`, in batches;
//! - `turns.rs` passes an aggregate's turn to its next row once a row releases it.

mod attempt;
mod claim;
mod health;
mod listen;
mod marks;
mod purge;
mod rooms;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

pub use health::Health;
use health::HealthState;

use crate::destination::Destinations;
use crate::metrics::OutboxMetrics;
use crate::outbox::Outbox;
use crate::sql::RelaySql;

/// How long the relay waits after a failed database call before it asks again.
const OUTAGE_PAUSE: Duration = Duration::from_secs(1);

/// A running relay. [`Relay::drain`] stops it; dropping it stops its claims too, without
/// waiting for its attempts.
#[derive(Debug)]
pub struct Relay {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    claims: JoinHandle<()>,
    marker: JoinHandle<()>,
}

/// What a relay's tasks share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) outbox: Outbox,
    /// The publisher of each destination URL.
    pub(crate) destinations: Destinations,
    /// This relay's name in `lease_owner`: unique per relay, so a mark is fenced to its claim.
    pub(crate) owner: String,
    /// The slots of `deliver_concurrency`: an attempt holds one from its claim to its answer.
    pub(crate) permits: Arc<Semaphore>,
    /// Each destination's share of them (`destination_concurrency`), held alike.
    pub(crate) rooms: rooms::Rooms,
    /// Poked by `NOTIFY`, by a passed turn, and by a full destination that has room again.
    pub(crate) wake: Notify,
    pub(crate) health: HealthState,
    /// Attempts run here, so a drain can wait for them.
    pub(crate) attempts: TaskTracker,
    pub(crate) metrics: OutboxMetrics,
    pub(crate) sql: RelaySql,
}

/// What a drain left undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Attempts still running when the drain timed out: their rows are attempted again after
    /// their lease, with the same key.
    pub attempts_left: usize,
    /// Whether every finished attempt's outcome was written.
    pub marks_written: bool,
}

impl Relay {
    /// Starts the relay's tasks on the current tokio runtime.
    pub(crate) fn start(outbox: Outbox, destinations: Destinations) -> Self {
        let config = outbox.config();
        let shared = Arc::new(Shared {
            owner: lease_owner(),
            permits: Arc::new(Semaphore::new(config.deliver_concurrency)),
            rooms: rooms::Rooms::new(config),
            wake: Notify::new(),
            health: HealthState::new(config.name.clone()),
            attempts: TaskTracker::new(),
            metrics: OutboxMetrics::new(&config.name),
            sql: RelaySql::new(&config.table, config.on_dead),
            outbox,
            destinations,
        });
        let (stop, stopped) = watch::channel(false);
        let (marks, marked) = mpsc::unbounded_channel();
        let claims = tokio::spawn(claim::run(shared.clone(), marks, stopped.clone()));
        let marker = tokio::spawn(marks::run(shared.clone(), marked));
        if let Some(channel) = shared.outbox.config().notify_channel.clone() {
            tokio::spawn(listen::run(shared.clone(), channel, stopped.clone()));
        }
        tokio::spawn(purge::run(shared.clone(), stopped));
        Self {
            shared,
            stop,
            claims,
            marker,
        }
    }

    /// Its state, for readiness.
    pub fn health(&self) -> Health {
        self.shared.health.get()
    }

    /// The outbox it delivers.
    pub fn outbox(&self) -> &Outbox {
        &self.shared.outbox
    }

    /// Stops claiming, gives back the rows it claimed and had not started, lets the attempts in
    /// flight finish and writes their outcomes, all within `timeout`.
    pub async fn drain(self, timeout: Duration) -> Drained {
        let deadline = Instant::now() + timeout;
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout_at(deadline, self.claims).await;
        let attempts = &self.shared.attempts;
        attempts.close();
        let _ = tokio::time::timeout_at(deadline, attempts.wait()).await;
        // The marker ends once the claim loop and every attempt have let go of their senders.
        let attempts_left = attempts.len();
        let marks_written =
            attempts_left == 0 && tokio::time::timeout_at(deadline, self.marker).await.is_ok();
        self.shared.health.stopped();
        Drained {
            attempts_left,
            marks_written,
        }
    }
}

/// `pid-<process id>-<random>`: unique per relay, and telling which process holds a lease.
fn lease_owner() -> String {
    let random = idempotency_delivery::backoff::random_sample();
    format!("pid-{}-{random:016x}", std::process::id())
}

/// Whether the relay was told to stop, or dropped.
pub(crate) fn is_stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

/// Waits `pause`, or less if the relay stops; `false` once it has.
pub(crate) async fn pause_unless_stopped(
    pause: Duration,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    if is_stopped(stop) {
        return false;
    }
    let _ = tokio::time::timeout(pause, stop.changed()).await;
    !is_stopped(stop)
}
