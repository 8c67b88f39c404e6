//! Every metric the proxy exports, in one table: it describes them to the recorder, and the
//! dashboards and alerts under `deploy/` are checked against it (`tests/it/deploy.rs`), so a
//! renamed or forgotten metric fails a test instead of leaving a panel empty.

use crate::operator::telemetry::CONFIG_RELOADS_TOTAL;
use idempotency_consumer as consumer;
use idempotency_core::proxy::{
    FAIL_OPEN_TOTAL, IN_FLIGHT, REQUESTS_TOTAL, STORE_SECONDS, STORE_UNAVAILABLE_TOTAL,
    UPSTREAM_SECONDS,
};
use idempotency_outbox::{
    ATTEMPTS_TOTAL, BLOCKED_AGGREGATES, CLAIM_SECONDS, DELIVERY_SECONDS, LEASES_LOST_TOTAL,
    LISTENING, OLDEST_PENDING_SECONDS, PENDING,
};

/// What kind of series a metric is, as Prometheus names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets (`_bucket`, `_sum`, `_count` series), in seconds.
    Histogram,
}

/// One metric the proxy exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The name as scraped.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Its labels.
    pub labels: &'static [&'static str],
}

const fn metric(
    name: &'static str,
    kind: MetricKind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        help,
        labels,
    }
}

/// Every metric the proxy exports (docs/reference.md#metrics): the one list that describes
/// them to the recorder, and that dashboards and alerts are checked against.
pub const METRICS: &[Metric] = &[
    metric(
        REQUESTS_TOTAL,
        MetricKind::Counter,
        &["route", "outcome"],
        "Requests by route and outcome",
    ),
    metric(
        FAIL_OPEN_TOTAL,
        MetricKind::Counter,
        &["route"],
        "Requests forwarded without deduplication because the store failed",
    ),
    metric(
        STORE_UNAVAILABLE_TOTAL,
        MetricKind::Counter,
        &["route"],
        "Requests answered 503 store-unavailable because the store failed",
    ),
    metric(
        IN_FLIGHT,
        MetricKind::Gauge,
        &["route"],
        "First requests running upstream now",
    ),
    metric(
        STORE_SECONDS,
        MetricKind::Histogram,
        &["op"],
        "Store operation latency",
    ),
    metric(
        UPSTREAM_SECONDS,
        MetricKind::Histogram,
        &["route"],
        "Upstream latency",
    ),
    metric(
        "idempotency_inbox_accepted_total",
        MetricKind::Counter,
        &["route"],
        "Inbox requests stored for delivery",
    ),
    metric(
        "idempotency_inbox_attempts_total",
        MetricKind::Counter,
        &["route", "result"],
        "Inbox delivery attempts by result: delivered, failed, dead",
    ),
    metric(
        "idempotency_inbox_pending",
        MetricKind::Gauge,
        &["route"],
        "Inbox deliveries waiting for an attempt",
    ),
    metric(
        "idempotency_inbox_oldest_pending_seconds",
        MetricKind::Gauge,
        &["route"],
        "Age of the oldest pending inbox delivery",
    ),
    metric(
        "idempotency_inbox_delivery_seconds",
        MetricKind::Histogram,
        &["route"],
        "Inbox delivery attempt latency",
    ),
    metric(
        ATTEMPTS_TOTAL,
        MetricKind::Counter,
        &["outbox", "result"],
        "Outbox delivery attempts by result: delivered, failed, dead",
    ),
    metric(
        PENDING,
        MetricKind::Gauge,
        &["outbox"],
        "Outbox rows waiting for an attempt, counted when scraped up to 10000 (that many or more)",
    ),
    metric(
        OLDEST_PENDING_SECONDS,
        MetricKind::Gauge,
        &["outbox"],
        "Age of the oldest outbox row neither delivered nor dead, read when scraped (exact below 10000 such rows)",
    ),
    metric(
        BLOCKED_AGGREGATES,
        MetricKind::Gauge,
        &["outbox"],
        "Aggregates whose later outbox rows wait behind a dead row, counted when scraped among the 10000 oldest dead rows",
    ),
    metric(
        DELIVERY_SECONDS,
        MetricKind::Histogram,
        &["outbox"],
        "Outbox rows from their commit (created_at) to their delivery",
    ),
    metric(
        CLAIM_SECONDS,
        MetricKind::Histogram,
        &["outbox"],
        "Outbox claim statements: how long each took",
    ),
    metric(
        LEASES_LOST_TOTAL,
        MetricKind::Counter,
        &["outbox"],
        "Outbox attempts whose lease ran out before their outcome was written",
    ),
    metric(
        LISTENING,
        MetricKind::Gauge,
        &["outbox"],
        "1 while the outbox relay's LISTEN connection is up, 0 while it only polls",
    ),
    metric(
        consumer::MESSAGES_TOTAL,
        MetricKind::Counter,
        &["consumer", "result"],
        "Broker messages settled by a consumer, by result: delivered, duplicate, retried, dead",
    ),
    metric(
        consumer::IN_FLIGHT,
        MetricKind::Gauge,
        &["consumer"],
        "Broker messages a consumer is working on",
    ),
    metric(
        consumer::LAG,
        MetricKind::Gauge,
        &["consumer"],
        "Messages not yet acknowledged, as the consumer's broker counts them",
    ),
    metric(
        consumer::DELIVERY_SECONDS,
        MetricKind::Histogram,
        &["consumer"],
        "A consumer's requests to its upstream through the idempotency layer",
    ),
    metric(
        CONFIG_RELOADS_TOTAL,
        MetricKind::Counter,
        &["result"],
        "Config reloads by result: ok, error",
    ),
];

/// Describes every metric of [`METRICS`] to the installed recorder.
pub(crate) fn describe_metrics() {
    for m in METRICS {
        match m.kind {
            MetricKind::Counter => metrics::describe_counter!(m.name, m.help),
            MetricKind::Gauge => metrics::describe_gauge!(m.name, m.help),
            MetricKind::Histogram => {
                metrics::describe_histogram!(m.name, metrics::Unit::Seconds, m.help);
            }
        }
    }
}
