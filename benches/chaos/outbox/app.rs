//! The application: workers that each write one to three events in a transaction with
//! [`idempotency_outbox::enqueue`], and commit it, or roll it back (one in six), as a business
//! write that failed would. Every event's fate is recorded: committed, rolled back, or unknown
//! (the commit itself failed, so the database may or may not have it; the checker looks in the
//! table).
//!
//! A third of the events carry an aggregate. Each worker has aggregates of its own, and commits
//! one transaction at a time, so the events of one aggregate commit in `seq` order and the
//! receiver must see their effects in that order.

use std::sync::Arc;
use std::time::Duration;

use idempotency_outbox::{enqueue, Event, EventId, TableName};
use idempotency_postgres::Pool;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::history::Journal;
use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Committed,
    /// Rolled back on purpose.
    RolledBack,
    /// Failed before the commit was sent (the database was down): nothing committed.
    Failed,
    /// The commit was sent and failed: it may have landed.
    Unknown,
}

/// One event the application wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Written {
    pub id: String,
    pub aggregate: Option<String>,
    pub outcome: Outcome,
}

/// The application's workers and where their history goes.
pub struct App {
    pub pool: Pool,
    pub journal: Journal<Written>,
}

/// Aggregates per worker.
const AGGREGATES: u64 = 5;
/// The pause between two transactions of one worker.
const PACE: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(40));

impl App {
    /// Worker `worker` writes transactions until `until`; returns how many it committed.
    pub async fn run(self: Arc<Self>, worker: usize, seed: u64, until: Instant) -> u64 {
        let mut rng = Rng::stream(seed, 9000 + worker as u64);
        let mut next = 0u64;
        let mut committed = 0;
        while Instant::now() < until {
            let events: Vec<(Event, Option<String>)> = (0..1 + rng.below(3))
                .map(|_| {
                    next += 1;
                    event(worker, next, &mut rng)
                })
                .collect();
            let roll_back = rng.chance(1.0 / 6.0);
            let outcome = self.transaction(&events, roll_back).await;
            if outcome == Outcome::Failed {
                // The database is down: try again soon, not in a tight loop.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            committed += u64::from(outcome == Outcome::Committed) * events.len() as u64;
            for (event, aggregate) in &events {
                self.journal.write(&Written {
                    id: event.id().as_str().to_owned(),
                    aggregate: aggregate.clone(),
                    outcome,
                });
            }
            tokio::time::sleep(rng.between(PACE.0, PACE.1)).await;
        }
        committed
    }

    /// One transaction: the events, then a commit or a rollback. Any failure before the commit
    /// was sent leaves nothing behind.
    async fn transaction(&self, events: &[(Event, Option<String>)], roll_back: bool) -> Outcome {
        let Ok(mut client) = self.pool.get().await else {
            return Outcome::Failed;
        };
        let Ok(transaction) = client.transaction().await else {
            return Outcome::Failed;
        };
        for (event, _) in events {
            if enqueue(&transaction, &TableName::default(), event)
                .await
                .is_err()
            {
                return Outcome::Failed;
            }
        }
        if roll_back {
            let _ = transaction.rollback().await;
            return Outcome::RolledBack;
        }
        match transaction.commit().await {
            Ok(()) => Outcome::Committed,
            Err(_) => Outcome::Unknown,
        }
    }
}

/// Event `n` of `worker`, and its aggregate: its id in the body too, so the receiver can tell
/// events apart whatever key it is sent with.
fn event(worker: usize, n: u64, rng: &mut Rng) -> (Event, Option<String>) {
    let id = format!("w{worker}-{n}");
    let body = serde_json::json!({ "event": id });
    let event = Event::json(EventId::new(&id).expect("a valid id"), "chaos", &body)
        .expect("JSON serializes");
    if rng.chance(1.0 / 3.0) {
        let aggregate = format!("w{worker}-a{}", rng.below(AGGREGATES));
        (event.aggregate(aggregate.clone()), Some(aggregate))
    } else {
        (event, None)
    }
}
