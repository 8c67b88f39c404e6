//! One inbox route's delivery worker: claims due deliveries and attempts each in a task of its
//! own, within `deliver_concurrency` and `deliver_rate`, until told to stop.
//!
//! It asks the store for due deliveries every `POLL` (so an attempt starts within 500 ms of its
//! due time, docs/reference.md#inbox-routes), at once when a request is queued in this process, and again
//! straight away while claims come back full. Each claim holds the route's `lease` (at least
//! the attempt's time-out and a margin, so a slow attempt is not claimed again meanwhile); a
//! replica that dies mid-attempt leaves its claim to run out, and another attempt follows.

use idempotency_core::proxy::ErrorChain;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::attempt::{attempt, AttemptResult, Attempted};
use super::backoff::{backoff, random_sample};
use super::metrics::{AttemptOutcome, AttemptReport, InboxMetrics};
use super::policy::DeliveryPolicy;
use super::rate::{DeliverRate, Reservation, Turn};
use crate::net::upstream::Upstream;
use crate::store::{Claim, Fenced, Settlement, Store, StoreError};
use idempotency_core::backend::{AttemptFailure, Delivery, RouteName};

/// How often the store is asked for due deliveries when nothing wakes the worker sooner.
const POLL: Duration = Duration::from_millis(250);
/// Most deliveries claimed in one store call.
const CLAIM_BATCH: usize = 64;
/// How long after a failed store call the worker asks again.
const STORE_PAUSE: Duration = Duration::from_secs(1);
/// Added to `deliver_timeout` in a claim's lease, so an attempt ends before its claim does.
const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// What one generation of the config says about an inbox route.
#[derive(Debug, Clone)]
pub(crate) struct RouteInbox {
    pub(crate) route: RouteName,
    /// The store as the route sees it (sealed when records are encrypted).
    pub(crate) store: Arc<dyn Store>,
    pub(crate) upstream: Upstream,
    pub(crate) policy: DeliveryPolicy,
    /// The route's `lease`.
    pub(crate) lease: Duration,
}

/// What a worker shares with its attempts.
pub(crate) struct Worker {
    pub(crate) inbox: RouteInbox,
    pub(crate) wake: Arc<Notify>,
    pub(crate) permits: Arc<Semaphore>,
    /// The route's `deliver_rate` pace, shared with the workers of other generations.
    pub(crate) rate: Arc<DeliverRate>,
    /// Attempts run here, so a drain can wait for them.
    pub(crate) attempts: TaskTracker,
    pub(crate) metrics: InboxMetrics,
}

impl Worker {
    fn lease(&self) -> Duration {
        self.inbox
            .lease
            .max(self.inbox.policy.deliver_timeout + LEASE_MARGIN)
    }

    /// Claims and starts attempts until `stop` turns true.
    pub(crate) async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        while !*stop.borrow() {
            let free = self.permits.available_permits();
            let room = self.rate.reserve(free.min(CLAIM_BATCH));
            let want = room.len();
            let claimed = match self.claim(room).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::warn!(route = %self.inbox.route, error = %ErrorChain(&e), "inbox: claiming deliveries failed");
                    let _ = tokio::time::timeout(STORE_PAUSE, stop.changed()).await;
                    continue;
                }
            };
            if want > 0 && claimed == want {
                continue;
            }
            self.pause(free, &mut stop).await;
        }
    }

    /// Waits for a reason to claim again: a local accept, a free slot, room in the pace, the
    /// poll interval, or the stop.
    async fn pause(&self, free: usize, stop: &mut watch::Receiver<bool>) {
        let rate_free = self.rate.next_free();
        let deadline = rate_free.unwrap_or_else(|| Instant::now() + POLL);
        let may_start = free > 0 && rate_free.is_none();
        tokio::select! {
            _ = stop.changed() => {}
            () = self.wake.notified(), if may_start => {}
            _ = self.permits.acquire(), if free == 0 => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }

    /// Claims as many due deliveries as `room` has room for and starts an attempt for each;
    /// returns how many, each with its turn in the pace. The room not used goes back to it.
    async fn claim(self: &Arc<Self>, mut room: Reservation) -> Result<usize, StoreError> {
        if room.len() == 0 {
            return Ok(0);
        }
        let inbox = self.inbox.store.inbox().ok_or_else(unsupported)?;
        let claims = inbox
            .claim(
                &self.inbox.route,
                SystemTime::now(),
                room.len(),
                self.lease(),
            )
            .await?;
        for claim in &claims {
            // It asked for no more than were free, so this waits only when the worker of an
            // earlier generation took a slot meanwhile (slots are shared across a reload).
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                break;
            };
            let turn = room.take();
            let worker = self.clone();
            let claim = claim.clone();
            self.attempts
                .spawn(async move { worker.deliver(claim, permit, turn).await });
        }
        Ok(claims.len())
    }

    /// One attempt in its turn, then its settlement.
    async fn deliver(&self, claim: Claim, permit: OwnedSemaphorePermit, turn: Turn) {
        let inbox = &self.inbox;
        let Attempted { result, elapsed } =
            attempt(&inbox.upstream, &claim.delivery, &inbox.policy, turn).await;
        drop(permit);
        let (status, error) = match &result {
            AttemptResult::Delivered(status) => (Some(*status), None),
            AttemptResult::Failed(failure) => (failure.status, failure.error.clone()),
        };
        let now = SystemTime::now();
        let (settlement, outcome) = settle_as(&self.inbox.policy, &claim.delivery, result, now);
        let delivery = claim.delivery.id.to_string();
        let key = claim.delivery.key.log_id();
        self.metrics.attempted(&AttemptReport {
            delivery: &delivery,
            key: key.as_str(),
            attempt: claim.delivery.attempts,
            outcome,
            status: status.map(|s| s.as_u16()),
            error: error.as_deref(),
            elapsed,
        });
        self.record(&claim, &settlement, &delivery).await;
    }

    async fn record(&self, claim: &Claim, settlement: &Settlement, delivery: &str) {
        let route = &self.inbox.route;
        let settled = match self.inbox.store.inbox() {
            Some(inbox) => inbox.settle(route, claim, settlement).await,
            None => Err(unsupported()),
        };
        match settled {
            Ok(Fenced::Applied) => {}
            Ok(Fenced::LeaseLost) => {
                tracing::warn!(route = %route, delivery, "inbox: the attempt outlived its claim; another attempt took over");
            }
            Err(e) => {
                tracing::warn!(route = %route, delivery, error = %ErrorChain(&e), "inbox: recording an attempt failed; it is tried again after its lease");
            }
        }
    }
}

fn unsupported() -> StoreError {
    StoreError::unavailable("inbox routes need a store that supports them")
}

/// What an attempt's result makes of the delivery: delivered, tried again after a backoff, or
/// dead once it has had `max_attempts` or is older than `max_age`.
pub(crate) fn settle_as(
    policy: &DeliveryPolicy,
    delivery: &Delivery,
    result: AttemptResult,
    now: SystemTime,
) -> (Settlement, AttemptOutcome) {
    let failure: AttemptFailure = match result {
        AttemptResult::Delivered(_) => return (Settlement::Delivered, AttemptOutcome::Delivered),
        AttemptResult::Failed(failure) => failure,
    };
    let age = now.duration_since(delivery.received_at).unwrap_or_default();
    if delivery.attempts >= policy.max_attempts || age >= policy.max_age {
        return (Settlement::Dead { failure }, AttemptOutcome::Dead);
    }
    let due = now + backoff(policy, delivery.attempts, random_sample());
    (Settlement::Retry { due, failure }, AttemptOutcome::Failed)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, Method, StatusCode};

    use super::*;
    use idempotency_core::backend::{IdempotencyKey, ScopedKey, StoredRequest};

    fn delivery(attempts: u32, age: Duration, now: SystemTime) -> Delivery {
        let key = IdempotencyKey::new("k").unwrap();
        let key = ScopedKey::new(RouteName::new("hooks").unwrap(), None, key);
        let request = StoredRequest {
            method: Method::POST,
            target: "/".into(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let mut delivery = Delivery::new(key, request);
        delivery.attempts = attempts;
        delivery.received_at = now - age;
        delivery
    }

    fn failed() -> AttemptResult {
        AttemptResult::Failed(AttemptFailure {
            status: Some(StatusCode::BAD_GATEWAY),
            error: Some("upstream answered 502".into()),
        })
    }

    #[test]
    fn a_failure_is_retried_below_its_ceiling_until_attempts_or_age_run_out() {
        let policy = DeliveryPolicy {
            max_attempts: 5,
            max_age: Duration::from_secs(3600),
            ..DeliveryPolicy::default()
        };
        let now = SystemTime::now();
        let minute = Duration::from_secs(60);
        let (retry, outcome) = settle_as(&policy, &delivery(3, minute, now), failed(), now);
        assert_eq!(outcome, AttemptOutcome::Failed);
        let Settlement::Retry { due, failure } = retry else {
            panic!("retried, got {retry:?}")
        };
        assert!(
            due >= now && due <= now + Duration::from_secs(4),
            "third failure: up to 4s"
        );
        assert_eq!(failure.status, Some(StatusCode::BAD_GATEWAY));
        let (_, outcome) = settle_as(&policy, &delivery(5, minute, now), failed(), now);
        assert_eq!(outcome, AttemptOutcome::Dead, "out of attempts");
        let old = Duration::from_secs(3600);
        let (dead, outcome) = settle_as(&policy, &delivery(1, old, now), failed(), now);
        assert_eq!(outcome, AttemptOutcome::Dead, "out of age");
        assert!(matches!(dead, Settlement::Dead { .. }));
        let ok = AttemptResult::Delivered(StatusCode::OK);
        let (done, outcome) = settle_as(&policy, &delivery(5, old, now), ok, now);
        assert_eq!(
            (done, outcome),
            (Settlement::Delivered, AttemptOutcome::Delivered)
        );
    }
}
