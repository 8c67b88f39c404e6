//! One place that reports what happened to a request: a log line and the request counter.
//!
//! Logs carry a short digest of the scoped key, never the key, a secret header or a body:
//! idempotency keys are often guessable customer data, and a log is read by many people.

use std::fmt;
use std::time::Duration;

use axum::body::Body;
use http::Response;

use crate::error::{Cause, ProxyError};
use crate::model::RouteName;

/// The counter of requests by route and outcome (SPEC section 7).
pub(crate) const REQUESTS_TOTAL: &str = "idempotency_requests_total";
/// Store operation latency, by operation.
pub(crate) const STORE_SECONDS: &str = "idempotency_store_operation_seconds";
/// Upstream latency, by route.
pub(crate) const UPSTREAM_SECONDS: &str = "idempotency_upstream_seconds";
/// First requests running upstream right now, by route.
pub(crate) const IN_FLIGHT: &str = "idempotency_in_flight";
/// Requests that went upstream without deduplication because the store failed (`fail_open`).
pub(crate) const FAIL_OPEN_TOTAL: &str = "idempotency_fail_open_total";
/// Config reloads by `result`: `ok` (applied) or `error` (refused; the running config stays).
pub(crate) const CONFIG_RELOADS_TOTAL: &str = "idempotency_config_reloads_total";

/// What the proxy did with a request, as named in metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum RequestOutcome {
    /// First request with its key: sent upstream, outcome stored.
    Forwarded,
    /// Answered from the store.
    Replayed,
    /// Another request with the key was still in flight.
    Conflict,
    /// The key was used before for a different request.
    Mismatch,
    /// Refused by the proxy (missing or invalid key, body too large, store unavailable).
    Rejected,
    /// Sent upstream, then the key was freed (not executed, or ambiguous with `release`).
    Released,
    /// Sent upstream without deduplication (no key, method not covered, store failed open).
    Bypassed,
}

impl RequestOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Forwarded => "forwarded",
            RequestOutcome::Replayed => "replayed",
            RequestOutcome::Conflict => "conflict",
            RequestOutcome::Mismatch => "mismatch",
            RequestOutcome::Rejected => "rejected",
            RequestOutcome::Released => "released",
            RequestOutcome::Bypassed => "bypassed",
        }
    }
}

impl fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const OUTCOMES: [RequestOutcome; 7] = [
    RequestOutcome::Forwarded,
    RequestOutcome::Replayed,
    RequestOutcome::Conflict,
    RequestOutcome::Mismatch,
    RequestOutcome::Rejected,
    RequestOutcome::Released,
    RequestOutcome::Bypassed,
];

/// One route's metric handles, registered once when the route is built, so the request path
/// does no registry look-ups. Build it after installing the metrics recorder.
#[derive(Debug, Clone)]
pub(crate) struct RouteMetrics {
    route: RouteName,
    requests: [metrics::Counter; 7],
    fail_open: metrics::Counter,
    in_flight: metrics::Gauge,
    upstream: metrics::Histogram,
    reserve: metrics::Histogram,
    complete: metrics::Histogram,
}

impl RouteMetrics {
    pub(crate) fn new(route: &RouteName) -> Self {
        let name = || route.as_str().to_owned();
        Self {
            route: route.clone(),
            requests: OUTCOMES.map(
                |o| metrics::counter!(REQUESTS_TOTAL, "route" => name(), "outcome" => o.as_str()),
            ),
            fail_open: metrics::counter!(FAIL_OPEN_TOTAL, "route" => name()),
            in_flight: metrics::gauge!(IN_FLIGHT, "route" => name()),
            upstream: metrics::histogram!(UPSTREAM_SECONDS, "route" => name()),
            reserve: metrics::histogram!(STORE_SECONDS, "op" => "reserve"),
            complete: metrics::histogram!(STORE_SECONDS, "op" => "complete"),
        }
    }

    /// Logs and counts one finished request. `key_id` is the scoped key's short digest, if
    /// any; the problem the proxy answered and the cause of a failure are read off the response.
    pub(crate) fn request_finished(
        &self,
        outcome: RequestOutcome,
        response: &Response<Body>,
        key_id: Option<&str>,
        elapsed: Duration,
    ) {
        self.requests[outcome as usize].increment(1);
        let problem = response.extensions().get::<ProxyError>();
        let cause = response.extensions().get::<Cause>();
        tracing::info!(
            route = self.route.as_str(),
            outcome = outcome.as_str(),
            status = response.status().as_u16(),
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            key = key_id.unwrap_or("-"),
            problem = problem.map(ProxyError::problem_type),
            cause = cause.map(|c| &*c.0),
            "request"
        );
    }

    /// Counts a first request as running upstream until the guard is dropped.
    pub(crate) fn in_flight(&self) -> InFlightGuard {
        self.in_flight.increment(1.0);
        InFlightGuard(self.in_flight.clone())
    }

    /// How long the upstream took to answer (headers and the buffered body).
    pub(crate) fn upstream_call(&self, elapsed: Duration) {
        self.upstream.record(elapsed.as_secs_f64());
    }

    /// How long reserving a key in the store took.
    pub(crate) fn reserved(&self, elapsed: Duration) {
        self.reserve.record(elapsed.as_secs_f64());
    }

    /// How long storing an outcome took.
    pub(crate) fn completed(&self, elapsed: Duration) {
        self.complete.record(elapsed.as_secs_f64());
    }

    /// A request forwarded without deduplication because the store failed (`fail_open`).
    pub(crate) fn failed_open(&self) {
        self.fail_open.increment(1);
    }
}

/// Counts a first request as running upstream until dropped.
pub(crate) struct InFlightGuard(metrics::Gauge);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Sends log lines to stderr as text or JSON; `RUST_LOG` narrows or widens what is logged.
pub(crate) fn init_logging(format: crate::config::LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: escape codes in a log file are noise to parse.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(std::io::stderr);
    let _ = match format {
        crate::config::LogFormat::Text => builder.try_init(),
        crate::config::LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
