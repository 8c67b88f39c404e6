//! The outbox campaign's nemesis: for each target (every relay, the database, the receiver) a
//! chain of faults drawn from the seed before the run, one after another on that target, while
//! the targets' chains overlap freely. Each fault is logged with when it began and when its
//! target was back.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::processes::{Service, LEASE};
use super::receiver::{Misbehaviour, Receiver};
use crate::history::{self, Journal};
use crate::rng::Rng;
use idempotency_test_support::postgres_server::{PostgresServer, Shutdown};

/// The mean gap between two faults on one target.
const MEAN_GAP: Duration = Duration::from_secs(4);

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// SIGKILL of a relay, restarted after the length.
    RelayKill,
    /// SIGSTOP of a relay, SIGCONT after the length (mostly past its lease).
    RelayPause,
    /// `stop -m immediate` of the database, started again after the length.
    DatabaseRestart,
    /// A share of the receiver's answers `500`/`503`, `410`, or slow.
    Receiver(Misbehaviour),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub at: Duration,
    pub kind: Kind,
    /// The relay's index (relay faults only).
    pub target: usize,
    pub length: Duration,
    pub share: f64,
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    pub kind: Kind,
    pub target: String,
    pub start: u64,
    pub end: u64,
}

/// What the faults act on.
pub struct Targets {
    pub relays: Vec<Service>,
    pub database: Mutex<PostgresServer>,
    pub receiver: Arc<Receiver>,
}

/// Every target's chain, for a campaign of `duration`: same seed, same schedule.
pub fn plan(seed: u64, relays: usize, duration: Duration) -> Vec<Vec<Planned>> {
    let mut chains = Vec::new();
    for relay in 0..relays {
        let mut rng = Rng::stream(seed, 100 + relay as u64);
        chains.push(chain(&mut rng, duration, |rng| relay_fault(rng, relay)));
    }
    let mut rng = Rng::stream(seed, 200);
    chains.push(chain(&mut rng, duration, |rng| Planned {
        at: Duration::ZERO,
        kind: Kind::DatabaseRestart,
        target: 0,
        length: rng.between(ms(300), ms(4000)),
        share: 0.0,
    }));
    let mut rng = Rng::stream(seed, 300);
    chains.push(chain(&mut rng, duration, receiver_fault));
    chains
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn chain(
    rng: &mut Rng,
    duration: Duration,
    mut draw: impl FnMut(&mut Rng) -> Planned,
) -> Vec<Planned> {
    let mut faults = Vec::new();
    let mut at = rng.exponential(MEAN_GAP);
    while at < duration {
        let mut fault = draw(rng);
        fault.at = at;
        at += fault.length + ms(200) + rng.exponential(MEAN_GAP);
        faults.push(fault);
    }
    faults
}

/// Kills down 0.2-3 s; pauses past the lease (another relay takes the rows over, and the paused
/// one wakes to marks it no longer owns), one in four far shorter.
fn relay_fault(rng: &mut Rng, relay: usize) -> Planned {
    let (kind, length) = match rng.below(3) {
        0 if rng.chance(0.25) => (Kind::RelayPause, rng.between(ms(100), ms(500))),
        0 => (Kind::RelayPause, rng.between(LEASE + ms(500), LEASE * 3)),
        _ => (Kind::RelayKill, rng.between(ms(200), ms(3000))),
    };
    Planned {
        at: Duration::ZERO,
        kind,
        target: relay,
        length,
        share: 0.0,
    }
}

/// `5xx` and slow answers for 30-80% of requests, `410` for 5-20% (each one a dead row).
fn receiver_fault(rng: &mut Rng) -> Planned {
    let (misbehaviour, share) = match rng.below(3) {
        0 => (Misbehaviour::Fail, 0.3 + 0.5 * rng.unit()),
        1 => (Misbehaviour::Gone, 0.05 + 0.15 * rng.unit()),
        _ => (Misbehaviour::Slow(ms(3000)), 0.3 + 0.5 * rng.unit()),
    };
    Planned {
        at: Duration::ZERO,
        kind: Kind::Receiver(misbehaviour),
        target: 0,
        length: rng.between(ms(2000), ms(8000)),
        share,
    }
}

/// Carries out every chain from `start`, side by side; returns when all have ended.
pub async fn run(
    chains: Vec<Vec<Planned>>,
    targets: Arc<Targets>,
    journal: Arc<Journal<Fault>>,
    start: Instant,
) {
    let tasks: Vec<_> = chains
        .into_iter()
        .map(|chain| {
            let (targets, journal) = (targets.clone(), journal.clone());
            tokio::spawn(async move {
                for fault in chain {
                    tokio::time::sleep_until(start + fault.at).await;
                    let begun = history::now();
                    let target = carry_out(&fault, &targets).await;
                    journal.write(&Fault {
                        kind: fault.kind,
                        target,
                        start: begun,
                        end: history::now(),
                    });
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

/// Starts the fault, waits its length, undoes it; returns the target's name.
async fn carry_out(fault: &Planned, targets: &Targets) -> String {
    match fault.kind {
        Kind::RelayKill => {
            let relay = &targets.relays[fault.target];
            relay.kill().await;
            tokio::time::sleep(fault.length).await;
            if !relay.start().await {
                eprintln!("chaos: relay-{} did not come back", fault.target);
            }
            format!("relay-{}", fault.target)
        }
        Kind::RelayPause => {
            let relay = &targets.relays[fault.target];
            relay.pause().await;
            tokio::time::sleep(fault.length).await;
            relay.resume().await;
            format!("relay-{}", fault.target)
        }
        Kind::DatabaseRestart => {
            let mut database = targets.database.lock().await;
            tokio::task::block_in_place(|| database.stop(Shutdown::Immediate));
            tokio::time::sleep(fault.length).await;
            database.restart().await;
            "database".to_owned()
        }
        Kind::Receiver(misbehaviour) => {
            targets.receiver.set(misbehaviour, fault.share);
            tokio::time::sleep(fault.length).await;
            targets.receiver.set(Misbehaviour::None, 0.0);
            "receiver".to_owned()
        }
    }
}
