//! The clients: each sends keyed POSTs, one operation at a time, retrying with the same key
//! and body (on any replica) until it gets an answer the proxy keeps, as a careful payment
//! client would. Every request and its result goes to the attempts history.
//!
//! Besides new operations a client now and then sends two copies of a new one at once to two
//! replicas (a hedged request), asks again for an earlier operation, or reuses a settled key
//! with another body, which must be refused with `422` and never run.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::history::{self, Attempt, Journal};
use crate::http::{self, Failure};
use crate::rng::Rng;

/// One operation: its key, its body, and the other body its key is reused with, if any.
#[derive(Debug, Clone)]
pub struct Operation {
    pub key: String,
    pub body: Bytes,
    pub other: Option<Bytes>,
}

pub struct Clients {
    pub ports: Vec<u16>,
    pub journal: Journal<Attempt>,
}

/// How the client behaves, per operation.
const HEDGE: f64 = 0.05;
const ASK_AGAIN: f64 = 0.08;
const REUSE: f64 = 0.03;
/// How long one operation keeps being retried during the faults.
const RUN_BUDGET: Duration = Duration::from_secs(30);
/// Between operations, so a handful of clients make hundreds of keys a second, not thousands.
const THINK: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(60));

impl Clients {
    /// Runs client `index` until `until`; returns every operation it started.
    pub async fn run(self: Arc<Self>, index: usize, seed: u64, until: Instant) -> Vec<Operation> {
        let mut rng = Rng::stream(seed, 1000 + index as u64);
        let mut operations: Vec<Operation> = Vec::new();
        while Instant::now() < until {
            if !operations.is_empty() && rng.chance(ASK_AGAIN) {
                let recent = operations.len().saturating_sub(500);
                let earlier = operations
                    [recent + rng.below((operations.len() - recent) as u64) as usize]
                    .clone();
                self.settle(index, &mut rng, &earlier, RUN_BUDGET, "run")
                    .await;
            } else {
                let operation = new_operation(&mut rng, seed, index, operations.len());
                if rng.chance(HEDGE) {
                    self.hedge(index, &mut rng, &operation).await;
                }
                let settled = self
                    .settle(index, &mut rng, &operation, RUN_BUDGET, "run")
                    .await;
                if settled && operation.other.is_some() {
                    self.reuse(index, &mut rng, &operation).await;
                }
                operations.push(operation);
            }
            tokio::time::sleep(rng.between(THINK.0, THINK.1)).await;
        }
        operations
    }

    /// Sends the operation until an answer the proxy keeps comes back or `budget` runs out.
    pub async fn settle(
        &self,
        client: usize,
        rng: &mut Rng,
        operation: &Operation,
        budget: Duration,
        phase: &str,
    ) -> bool {
        let deadline = Instant::now() + budget;
        loop {
            let replica = rng.below(self.ports.len() as u64) as usize;
            let limit = client_timeout(rng);
            let attempt = self
                .send(client, replica, limit, operation, true, phase)
                .await;
            if attempt.definite() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(backoff(rng, &attempt)).await;
        }
    }

    /// Two copies at once, to two replicas: only one may run.
    async fn hedge(&self, client: usize, rng: &mut Rng, operation: &Operation) {
        let first = rng.below(self.ports.len() as u64) as usize;
        let second = (first + 1) % self.ports.len();
        let limit = client_timeout(rng);
        tokio::join!(
            self.send(client, first, limit, operation, true, "run"),
            self.send(client, second, limit, operation, true, "run"),
        );
    }

    /// The settled key with another body, until the proxy says something other than "retry".
    async fn reuse(&self, client: usize, rng: &mut Rng, operation: &Operation) {
        let deadline = Instant::now() + RUN_BUDGET;
        while Instant::now() < deadline {
            let replica = rng.below(self.ports.len() as u64) as usize;
            let limit = client_timeout(rng);
            let attempt = self
                .send(client, replica, limit, operation, false, "run")
                .await;
            if attempt.definite() {
                return;
            }
            tokio::time::sleep(backoff(rng, &attempt)).await;
        }
    }

    async fn send(
        &self,
        client: usize,
        replica: usize,
        limit: Duration,
        operation: &Operation,
        main: bool,
        phase: &str,
    ) -> Attempt {
        let body = match (&operation.other, main) {
            (Some(other), false) => other.clone(),
            _ => operation.body.clone(),
        };
        let start = history::now();
        let result = http::post(self.ports[replica], &operation.key, body.clone(), limit).await;
        let mut attempt = Attempt {
            start,
            end: history::now(),
            client,
            key: operation.key.clone(),
            body: history::digest(&body),
            main,
            replica,
            status: None,
            replayed: false,
            answer: None,
            exec: None,
            error: None,
            phase: phase.to_owned(),
        };
        match result {
            Ok(answer) => {
                attempt.status = Some(answer.status);
                attempt.replayed = answer.replayed;
                attempt.answer = Some(history::digest(&answer.body));
                attempt.exec = exec_of(&answer.body);
            }
            Err(failure) => attempt.error = Some(failure.name().to_owned()),
        }
        self.journal.write(&attempt);
        attempt
    }
}

fn new_operation(rng: &mut Rng, seed: u64, client: usize, number: usize) -> Operation {
    let key = format!("s{seed}-c{client}-{number}");
    let amount = 1 + rng.below(100_000);
    let body = |amount: u64| Bytes::from(format!(r#"{{"op":"{key}","amount":{amount}}}"#));
    Operation {
        body: body(amount),
        other: rng.chance(REUSE).then(|| body(amount + 1)),
        key,
    }
}

/// Mostly patient (past the proxy's upstream time-out), sometimes impatient, so that some
/// clients give up on an operation that goes on running.
fn client_timeout(rng: &mut Rng) -> Duration {
    if rng.chance(0.75) {
        rng.between(Duration::from_secs(4), Duration::from_secs(8))
    } else {
        rng.between(Duration::from_millis(200), Duration::from_millis(1500))
    }
}

fn backoff(rng: &mut Rng, attempt: &Attempt) -> Duration {
    match (attempt.status, attempt.error.as_deref()) {
        (Some(503), _) => rng.between(Duration::from_millis(200), Duration::from_millis(800)),
        (_, Some(name)) if name == Failure::Connect.name() => {
            rng.between(Duration::from_millis(100), Duration::from_millis(400))
        }
        _ => rng.between(Duration::from_millis(50), Duration::from_millis(400)),
    }
}

/// The upstream run an answer came from, when its body names one.
fn exec_of(body: &[u8]) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("exec")?.as_u64()
}
