//! One inbox route's delivery worker: claims due deliveries and attempts each in a task of its
//! own, within `deliver_concurrency` and `deliver_rate`, until told to stop.
//!
//! It asks the store for due deliveries every `POLL` (so an attempt starts within 500 ms of its
//! due time, SPEC section 11), at once when a request is queued in this process, and again
//! straight away while claims come back full. Each claim holds the route's `lease` (at least
//! the attempt's time-out and a margin, so a slow attempt is not claimed again meanwhile); a
//! replica that dies mid-attempt leaves its claim to run out, and another attempt follows.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::attempt::{attempt, AttemptResult};
use super::backoff::{backoff, random_sample};
use super::metrics::{AttemptOutcome, AttemptReport, InboxMetrics};
use super::policy::DeliveryPolicy;
use super::rate::RateWindow;
use crate::model::{AttemptFailure, Delivery, RouteName};
use crate::store::{Claim, Fenced, Settlement, Store, StoreError};
use crate::upstream::Upstream;

/// How often the store is asked for due deliveries when nothing wakes the worker sooner.
const POLL: Duration = Duration::from_millis(250);
/// Most deliveries claimed in one store call.
const CLAIM_BATCH: usize = 64;
/// How long after a failed store call the worker asks again.
const STORE_PAUSE: Duration = Duration::from_secs(1);
/// How often the queues are counted for the metrics.
const COUNT_EVERY: Duration = Duration::from_secs(2);
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
        let mut rate = RateWindow::new(self.inbox.policy.deliver_rate);
        let mut next_count = Instant::now();
        while !*stop.borrow() {
            if Instant::now() >= next_count {
                self.count().await;
                next_count = Instant::now() + COUNT_EVERY;
            }
            let free = self.permits.available_permits();
            let want = rate.allowed(Instant::now(), free.min(CLAIM_BATCH));
            let claimed = match self.claim(want, &mut rate).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::warn!(route = %self.inbox.route, error = %e, "inbox: claiming deliveries failed");
                    let _ = tokio::time::timeout(STORE_PAUSE, stop.changed()).await;
                    continue;
                }
            };
            if want > 0 && claimed == want {
                continue;
            }
            self.pause(free, &rate, &mut stop).await;
        }
    }

    /// Waits for a reason to claim again: a local accept, a free slot, the rate window, the
    /// poll interval, or the stop.
    async fn pause(&self, free: usize, rate: &RateWindow, stop: &mut watch::Receiver<bool>) {
        let rate_free = rate.next_free();
        let deadline = rate_free.unwrap_or_else(|| Instant::now() + POLL);
        let may_start = free > 0 && rate_free.is_none();
        tokio::select! {
            _ = stop.changed() => {}
            () = self.wake.notified(), if may_start => {}
            _ = self.permits.acquire(), if free == 0 => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }

    /// Claims up to `want` due deliveries and starts an attempt for each; returns how many.
    async fn claim(
        self: &Arc<Self>,
        want: usize,
        rate: &mut RateWindow,
    ) -> Result<usize, StoreError> {
        if want == 0 {
            return Ok(0);
        }
        let inbox = self.inbox.store.inbox().ok_or_else(unsupported)?;
        let claims = inbox
            .claim(&self.inbox.route, SystemTime::now(), want, self.lease())
            .await?;
        rate.started(Instant::now(), claims.len());
        for claim in &claims {
            // Only this loop takes permits, and it asked for no more than were free.
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                break;
            };
            let worker = self.clone();
            let claim = claim.clone();
            self.attempts
                .spawn(async move { worker.deliver(claim, permit).await });
        }
        Ok(claims.len())
    }

    /// One attempt, then its settlement.
    async fn deliver(&self, claim: Claim, permit: OwnedSemaphorePermit) {
        let started = Instant::now();
        let result = attempt(&self.inbox.upstream, &claim.delivery, &self.inbox.policy).await;
        drop(permit);
        let elapsed = started.elapsed();
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
            key: &key,
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
                tracing::warn!(route = %route, delivery, error = %e, "inbox: recording an attempt failed; it is tried again after its lease");
            }
        }
    }

    /// Counts the queues for the metrics.
    async fn count(&self) {
        let Some(inbox) = self.inbox.store.inbox() else {
            return;
        };
        if let Ok(queues) = inbox.queues(&self.inbox.route, SystemTime::now()).await {
            self.metrics.queues(&queues);
        }
    }
}

fn unsupported() -> StoreError {
    StoreError::Unavailable("inbox routes need a store that supports them".into())
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
