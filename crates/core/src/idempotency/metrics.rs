//! One place that reports what happened to a request: the request counter, the latency
//! histograms, and the route's [`RequestObserver`] (the proxy's log line and status page).
//!
//! Observers get a short digest of the scoped key, never the key, a secret header or a body:
//! idempotency keys are often guessable customer data, and a log is read by many people.

use crate::grpc::GrpcCode;
use std::sync::Arc;
use std::time::Duration;

use axum_core::body::Body;
use http::Response;

use super::observer::{FinishedRequest, RequestObserver};
use crate::error::{Cause, Problem};
use crate::model::RouteName;
use crate::outcome::{Outcome, OUTCOMES};

/// The counter of requests by route and outcome (docs/reference.md#metrics).
pub const REQUESTS_TOTAL: &str = "idempotency_requests_total";
/// Store operation latency, by operation.
pub const STORE_SECONDS: &str = "idempotency_store_operation_seconds";
/// Upstream latency, by route.
pub const UPSTREAM_SECONDS: &str = "idempotency_upstream_seconds";
/// First requests running upstream right now, by route.
pub const IN_FLIGHT: &str = "idempotency_in_flight";
/// Requests that went upstream without deduplication because the store failed (`fail_open`).
pub const FAIL_OPEN_TOTAL: &str = "idempotency_fail_open_total";
/// Requests answered `503 store-unavailable` (`fail_closed`), by route.
pub const STORE_UNAVAILABLE_TOTAL: &str = "idempotency_store_unavailable_total";

/// One route's metric handles, registered once when the route is built, so the request path
/// does no registry look-ups. Build it after installing the metrics recorder.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    requests: [metrics::Counter; 7],
    fail_open: metrics::Counter,
    store_unavailable: metrics::Counter,
    in_flight: metrics::Gauge,
    upstream: metrics::Histogram,
    reserve: metrics::Histogram,
    complete: metrics::Histogram,
    /// What the embedding program keeps of the route's requests.
    observer: Arc<dyn RequestObserver>,
}

impl RouteMetrics {
    /// Registers the route's metrics; `observer` hears of every request too.
    pub fn new(route: &RouteName, observer: Arc<dyn RequestObserver>) -> Self {
        let name = || route.as_str().to_owned();
        Self {
            requests: OUTCOMES.map(
                |o| metrics::counter!(REQUESTS_TOTAL, "route" => name(), "outcome" => o.as_str()),
            ),
            fail_open: metrics::counter!(FAIL_OPEN_TOTAL, "route" => name()),
            store_unavailable: metrics::counter!(STORE_UNAVAILABLE_TOTAL, "route" => name()),
            in_flight: metrics::gauge!(IN_FLIGHT, "route" => name()),
            upstream: metrics::histogram!(UPSTREAM_SECONDS, "route" => name()),
            reserve: metrics::histogram!(STORE_SECONDS, "op" => "reserve"),
            complete: metrics::histogram!(STORE_SECONDS, "op" => "complete"),
            observer,
        }
    }

    /// Logs and counts one finished request. `key_id` is the scoped key's short digest, if
    /// any; the problem the proxy answered and the cause of a failure are read off the response.
    pub fn request_finished(
        &self,
        outcome: Outcome,
        response: &Response<Body>,
        key_id: Option<&str>,
        elapsed: Duration,
    ) {
        self.requests[outcome as usize].increment(1);
        let status = response.status().as_u16();
        let problem = response.extensions().get::<Problem>();
        if matches!(problem, Some(Problem::StoreUnavailable)) {
            self.store_unavailable.increment(1);
        }
        self.observer.request_finished(&FinishedRequest {
            outcome,
            status,
            grpc_status: response.extensions().get::<GrpcCode>().copied(),
            key_id,
            elapsed,
            problem,
            cause: response.extensions().get::<Cause>(),
        });
    }

    /// Counts a first request as running upstream until the guard is dropped.
    pub(crate) fn in_flight(&self) -> InFlightGuard<'_> {
        self.in_flight.increment(1.0);
        self.observer.in_flight_moved(1);
        InFlightGuard(self)
    }

    /// How long the upstream took to answer (headers and the buffered body).
    pub(crate) fn upstream_call(&self, elapsed: Duration) {
        self.upstream.record(elapsed.as_secs_f64());
    }

    /// How long reserving a key in the store took.
    pub(crate) fn reserved(&self, elapsed: Duration) {
        self.reserve.record(elapsed.as_secs_f64());
        self.observer.store_operation(elapsed);
    }

    /// How long storing an outcome took.
    pub(crate) fn completed(&self, elapsed: Duration) {
        self.complete.record(elapsed.as_secs_f64());
        self.observer.store_operation(elapsed);
    }

    /// A request forwarded without deduplication because the store failed (`fail_open`).
    pub(crate) fn failed_open(&self) {
        self.fail_open.increment(1);
    }
}

/// Counts a first request as running upstream until dropped.
pub(crate) struct InFlightGuard<'a>(&'a RouteMetrics);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.decrement(1.0);
        self.0.observer.in_flight_moved(-1);
    }
}
