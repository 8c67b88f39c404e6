//! What the proxy keeps of every request the layer reports: its access log line and the status
//! page's record of its route.
//!
//! The layer counts requests through the `metrics` facade itself; this observer adds what only
//! the proxy has. Lines carry the scoped key's short digest, never the key, a secret header or
//! a body: idempotency keys are often guessable customer data, and a log is read by many people.

use idempotency_core::policy::GrpcCode;
use std::sync::Arc;
use std::time::Duration;

use idempotency_core::backend::RouteName;
use idempotency_core::observe::{FinishedRequest, RequestObserver};
use idempotency_core::Problem;

use crate::operator::logging::RequestLine;
use crate::operator::status::activity::RouteActivity;

/// Config reloads by `result`: `ok` (applied) or `error` (refused; the running config stays).
pub(crate) const CONFIG_RELOADS_TOTAL: &str = "idempotency_config_reloads_total";

/// The observer the proxy gives each route's layer
/// ([`LayerBuilder::with_observer`](idempotency_core::LayerBuilder::with_observer)): each
/// request's access line, and its route's [`RouteActivity`] on the status page.
#[derive(Debug)]
pub struct RouteTelemetry {
    route: RouteName,
    activity: Arc<RouteActivity>,
}

impl RouteTelemetry {
    /// The observer of `route`, writing into the route's status page activity.
    pub fn new(route: &RouteName) -> Arc<Self> {
        let activity = RouteActivity::of(route);
        Arc::new(Self {
            route: route.clone(),
            activity,
        })
    }
}

impl RequestObserver for RouteTelemetry {
    fn request_finished(&self, request: &FinishedRequest<'_>) {
        let grpc_status = request.grpc_status.map(GrpcCode::as_u32);
        self.activity.request_finished(
            request.outcome,
            request.status,
            grpc_status,
            request.key_id,
        );
        RequestLine {
            route: self.route.as_str(),
            outcome: request.outcome.as_str(),
            status: request.status,
            grpc_status,
            latency: request.elapsed,
            key: request.key_id.unwrap_or("-"),
            problem: request.problem.map(Problem::problem_type),
            cause: request.cause.map(|c| &*c.0),
        }
        .log();
    }

    fn in_flight_moved(&self, by: i64) {
        self.activity.in_flight_moved(by);
    }

    fn store_operation(&self, took: Duration) {
        self.activity.store_operation(took);
    }
}
