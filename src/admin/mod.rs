//! The admin listener: health, readiness, metrics, the status page, and inspecting or dropping
//! one record.
//!
//! It runs on its own address so that operators can firewall it away from clients: it can
//! drop records, which re-opens a key to a second execution.

mod keys;
mod page;
mod recorder;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use crate::idempotency::Policy;
use crate::secret::Secret;
use crate::status::Status;
use crate::store::Store;

pub(crate) use recorder::metrics_handle;

/// What the admin endpoints reach into: the store (with the replay cache in front, so a removed
/// record is also dropped from this replica's memory), each route's policy (for its scope
/// header), and what the status page reports.
pub(crate) struct Records {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) policies: Vec<Arc<Policy>>,
    pub(crate) status: Arc<Status>,
}

#[derive(Clone)]
struct AdminState {
    store: Arc<dyn Store>,
    policies: Arc<HashMap<String, Arc<Policy>>>,
    metrics: PrometheusHandle,
    status: Arc<Status>,
}

/// The admin routes, over the proxy's store and route policies. With a `token`, `/metrics`,
/// `/status` and `/keys` require `Authorization: Bearer <token>`; `/healthz` and `/readyz`
/// stay open for orchestrators' probes, and `/` (the status page) for browsers, as they reveal
/// nothing: the page asks for the token and fetches its data from `/status`.
pub(crate) fn router(records: Records, token: Option<Secret>) -> axum::Router {
    let policies = records
        .policies
        .into_iter()
        .map(|p| (p.route.as_str().to_owned(), p));
    let state = AdminState {
        store: records.store,
        policies: Arc::new(policies.collect()),
        metrics: metrics_handle(),
        status: records.status,
    };
    let guarded = axum::Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AdminState>| async move { s.metrics.render() }),
        )
        .route("/status", get(page::status))
        .route(
            "/keys/{route}/{key}",
            get(keys::inspect).delete(keys::remove),
        )
        .route_layer(middleware::from_fn_with_state(
            token.map(Arc::new),
            require_token,
        ));
    axum::Router::new()
        .route("/", get(page::page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(state)
}

async fn require_token(
    State(token): State<Option<Arc<Secret>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if given.is_some_and(|given| token.matches(given)) {
        return next.run(request).await;
    }
    let mut refused = (
        StatusCode::UNAUTHORIZED,
        Json(json!({ "error": "admin token required" })),
    )
        .into_response();
    refused
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    refused
}

async fn readyz(State(state): State<AdminState>) -> Response {
    match state.store.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: store unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "store unreachable").into_response()
        }
    }
}
