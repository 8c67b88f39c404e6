//! An inbox route's delivery metrics (docs/reference.md#inbox-routes): the attempts' counters
//! and latency, registered once per worker, with the one log line each attempt makes; and the
//! queues' gauges, set from a count of the queues when `/metrics` is scraped (`stats.rs`).

use std::time::Duration;

use crate::operator::logging::DELIVERY_LINE_TARGET;
use idempotency_core::backend::{InboxQueues, RouteName};

const ATTEMPTS_TOTAL: &str = "idempotency_inbox_attempts_total";
const PENDING: &str = "idempotency_inbox_pending";
const OLDEST_PENDING_SECONDS: &str = "idempotency_inbox_oldest_pending_seconds";
const DELIVERY_SECONDS: &str = "idempotency_inbox_delivery_seconds";

/// What an attempt came to, as metrics and logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptOutcome {
    /// The upstream took it.
    Delivered,
    /// It failed and will be tried again.
    Failed,
    /// It failed for the last time.
    Dead,
}

impl AttemptOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Delivered => "delivered",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Dead => "dead",
        }
    }
}

/// One route's handles.
#[derive(Debug, Clone)]
pub(crate) struct InboxMetrics {
    route: RouteName,
    attempts: [metrics::Counter; 3],
    delivery: metrics::Histogram,
}

/// One route's queue gauges.
#[derive(Debug, Clone)]
pub(crate) struct QueueGauges {
    pending: metrics::Gauge,
    oldest: metrics::Gauge,
}

impl QueueGauges {
    pub(crate) fn new(route: &RouteName) -> Self {
        let name = || route.as_str().to_owned();
        Self {
            pending: metrics::gauge!(PENDING, "route" => name()),
            oldest: metrics::gauge!(OLDEST_PENDING_SECONDS, "route" => name()),
        }
    }

    /// The queues as just counted: deliveries waiting for an attempt, and the oldest one's
    /// age, to the millisecond as `GET /inbox/{route}` tells it.
    pub(crate) fn set(&self, queues: &InboxQueues) {
        self.pending.set(queues.pending as f64);
        self.oldest
            .set(queues.oldest_pending.as_millis() as f64 / 1000.0);
    }
}

/// What one attempt's log line says.
pub(crate) struct AttemptReport<'a> {
    pub(crate) delivery: &'a str,
    pub(crate) key: &'a str,
    pub(crate) attempt: u32,
    pub(crate) outcome: AttemptOutcome,
    pub(crate) status: Option<u16>,
    pub(crate) error: Option<&'a str>,
    pub(crate) elapsed: Duration,
}

impl InboxMetrics {
    pub(crate) fn new(route: &RouteName) -> Self {
        let name = || route.as_str().to_owned();
        let outcomes = [
            AttemptOutcome::Delivered,
            AttemptOutcome::Failed,
            AttemptOutcome::Dead,
        ];
        Self {
            route: route.clone(),
            attempts: outcomes.map(
                |o| metrics::counter!(ATTEMPTS_TOTAL, "route" => name(), "result" => o.as_str()),
            ),
            delivery: metrics::histogram!(DELIVERY_SECONDS, "route" => name()),
        }
    }

    /// Counts and logs one finished attempt.
    pub(crate) fn attempted(&self, report: &AttemptReport<'_>) {
        self.attempts[report.outcome as usize].increment(1);
        self.delivery.record(report.elapsed.as_secs_f64());
        tracing::info!(
            target: DELIVERY_LINE_TARGET,
            route = self.route.as_str(),
            delivery = report.delivery,
            key = report.key,
            attempt = report.attempt,
            result = report.outcome.as_str(),
            status = report.status,
            error = report.error,
            elapsed_ms = report.elapsed.as_secs_f64() * 1000.0,
            "delivery attempt"
        );
    }
}
