//! An outbox's attempt metrics, through the `metrics` facade (whichever recorder the process
//! installed), and the one log line each attempt makes.
//!
//! The gauges (`idempotency_outbox_pending`, `..._oldest_pending_seconds`,
//! `..._blocked_aggregates`) are not kept here: they are readings of the table, which
//! [`Outbox::gauges`](crate::Outbox::gauges) takes when someone asks.

use std::time::Duration;

use crate::names::OutboxName;
use crate::verdict::Verdict;

/// `idempotency_outbox_attempts_total{outbox, result}`.
pub const ATTEMPTS_TOTAL: &str = "idempotency_outbox_attempts_total";
/// `idempotency_outbox_delivery_seconds{outbox}`: from the row's `created_at` to its delivery.
pub const DELIVERY_SECONDS: &str = "idempotency_outbox_delivery_seconds";
/// `idempotency_outbox_pending{outbox}`.
pub const PENDING: &str = "idempotency_outbox_pending";
/// `idempotency_outbox_oldest_pending_seconds{outbox}`.
pub const OLDEST_PENDING_SECONDS: &str = "idempotency_outbox_oldest_pending_seconds";
/// `idempotency_outbox_blocked_aggregates{outbox}`.
pub const BLOCKED_AGGREGATES: &str = "idempotency_outbox_blocked_aggregates";
/// `idempotency_outbox_leases_lost_total{outbox}`: attempts whose outcome was not written,
/// because their lease ran out and another claim took the row over.
pub const LEASES_LOST_TOTAL: &str = "idempotency_outbox_leases_lost_total";
/// `idempotency_outbox_claim_seconds{outbox}`: how long each claim statement took.
pub const CLAIM_SECONDS: &str = "idempotency_outbox_claim_seconds";
/// `idempotency_outbox_listening{outbox}`: 1 while the `LISTEN` connection is up, 0 while the
/// relay only polls (an outbox without `notify_channel` does not report it).
pub const LISTENING: &str = "idempotency_outbox_listening";
/// The target of each attempt's log line: an access line, like a request's.
pub const ATTEMPT_LINE_TARGET: &str = "idempotency_outbox::attempt";

/// One outbox's handles.
#[derive(Debug, Clone)]
pub(crate) struct OutboxMetrics {
    outbox: OutboxName,
    /// `delivered`, `failed`, `dead`.
    attempts: [metrics::Counter; 3],
    delivery: metrics::Histogram,
    leases_lost: metrics::Counter,
    claim: metrics::Histogram,
    listening: metrics::Gauge,
}

/// What one attempt's log line says.
pub(crate) struct AttemptReport<'a> {
    pub(crate) id: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) aggregate: Option<&'a str>,
    pub(crate) attempt: u32,
    pub(crate) verdict: &'a Verdict,
    pub(crate) elapsed: Duration,
}

impl OutboxMetrics {
    pub(crate) fn new(outbox: &OutboxName) -> Self {
        let name = || outbox.as_str().to_owned();
        Self {
            outbox: outbox.clone(),
            attempts: ["delivered", "failed", "dead"].map(
                |result| metrics::counter!(ATTEMPTS_TOTAL, "outbox" => name(), "result" => result),
            ),
            delivery: metrics::histogram!(DELIVERY_SECONDS, "outbox" => name()),
            leases_lost: metrics::counter!(LEASES_LOST_TOTAL, "outbox" => name()),
            claim: metrics::histogram!(CLAIM_SECONDS, "outbox" => name()),
            listening: metrics::gauge!(LISTENING, "outbox" => name()),
        }
    }

    /// Counts an attempt whose outcome was not written: its lease was lost.
    pub(crate) fn lease_lost(&self) {
        self.leases_lost.increment(1);
    }

    /// Records how long a claim took.
    pub(crate) fn claimed(&self, took: Duration) {
        self.claim.record(took.as_secs_f64());
    }

    /// Whether the `LISTEN` connection is up.
    pub(crate) fn listening(&self, up: bool) {
        self.listening.set(if up { 1.0 } else { 0.0 });
    }

    /// Counts and logs one attempt; `age` is the row's, for a delivered one.
    pub(crate) fn attempted(&self, report: &AttemptReport<'_>, age: Duration) {
        let (index, status, error) = match report.verdict {
            Verdict::Delivered { status } => (0, *status, None),
            Verdict::Retry { status, error, .. } => (1, *status, Some(error.as_str())),
            Verdict::Dead { status, error } => (2, *status, Some(error.as_str())),
        };
        self.attempts[index].increment(1);
        if index == 0 {
            self.delivery.record(age.as_secs_f64());
        }
        tracing::info!(
            target: ATTEMPT_LINE_TARGET,
            outbox = self.outbox.as_str(),
            id = report.id,
            topic = report.topic,
            aggregate = report.aggregate,
            attempt = report.attempt,
            result = report.verdict.result(),
            status = status.map(|s| s.as_u16()),
            error,
            elapsed_ms = report.elapsed.as_secs_f64() * 1000.0,
            "outbox attempt"
        );
    }
}
