//! The brokers campaign's nemesis: a chain of faults for each target (every relay, the
//! consumer, the broker, the receiver), drawn from the seed before the run and carried out one
//! after another on that target while the chains overlap freely, as in the outbox campaign.
//! Each fault is logged with when it began and when its target listened again.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::history::{self, Journal};
use crate::outbox::processes::Service;
use crate::outbox::receiver::{Misbehaviour, Receiver};
use crate::rng::Rng;

/// The mean gap between two faults on one target.
const MEAN_GAP: Duration = Duration::from_secs(4);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// SIGKILL of a relay, restarted after the length.
    RelayKill,
    /// SIGKILL of the consumer, restarted after the length.
    ConsumerKill,
    /// SIGKILL of `nats-server`, restarted on its port and store directory after the length.
    BrokerKill,
    /// A share of the receiver's answers `500`/`503`, nothing done.
    ReceiverFail,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub at: Duration,
    pub kind: Kind,
    /// The relay's index (relay kills only).
    pub target: usize,
    pub length: Duration,
    /// The share of the receiver's answers that fail.
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
    pub consumer: Service,
    pub broker: Service,
    pub receiver: Arc<Receiver>,
}

/// Every target's chain, for a campaign of `duration`: same seed, same schedule. Processes stay
/// down 0.2-3 s (the broker up to 4 s); the receiver fails 30-80% of its answers for 2-8 s.
pub fn plan(seed: u64, relays: usize, duration: Duration) -> Vec<Vec<Planned>> {
    let ms = Duration::from_millis;
    let mut targets: Vec<(Kind, usize, Duration, Duration)> = (0..relays)
        .map(|relay| (Kind::RelayKill, relay, ms(200), ms(3000)))
        .collect();
    targets.push((Kind::ConsumerKill, 0, ms(200), ms(3000)));
    targets.push((Kind::BrokerKill, 0, ms(300), ms(4000)));
    targets.push((Kind::ReceiverFail, 0, ms(2000), ms(8000)));
    let mut chains = Vec::new();
    for (part, (kind, target, low, high)) in targets.into_iter().enumerate() {
        let mut rng = Rng::stream(seed, 1100 + part as u64);
        let mut faults = Vec::new();
        let mut at = rng.exponential(MEAN_GAP);
        while at < duration {
            let length = rng.between(low, high);
            let share = 0.3 + 0.5 * rng.unit();
            faults.push(Planned {
                at,
                kind,
                target,
                length,
                share,
            });
            at += length + ms(200) + rng.exponential(MEAN_GAP);
        }
        chains.push(faults);
    }
    chains
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
    let (service, name) = match fault.kind {
        Kind::RelayKill => (
            &targets.relays[fault.target],
            format!("relay-{}", fault.target),
        ),
        Kind::ConsumerKill => (&targets.consumer, "consumer".to_owned()),
        Kind::BrokerKill => (&targets.broker, "broker".to_owned()),
        Kind::ReceiverFail => {
            targets.receiver.set(Misbehaviour::Fail, fault.share);
            tokio::time::sleep(fault.length).await;
            targets.receiver.set(Misbehaviour::None, 0.0);
            return "receiver".to_owned();
        }
    };
    service.kill().await;
    tokio::time::sleep(fault.length).await;
    if !service.start().await {
        eprintln!("chaos: {name} did not come back");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_plans_one_schedule_with_every_target() {
        let chains = plan(5, 2, Duration::from_secs(600));
        assert_eq!(chains, plan(5, 2, Duration::from_secs(600)));
        assert_ne!(chains, plan(6, 2, Duration::from_secs(600)));
        assert_eq!(chains.len(), 5);
        assert!(chains.iter().all(|c| c.len() > 20), "about one a 6 s");
    }
}
