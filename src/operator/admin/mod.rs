//! The admin listener: health, readiness, metrics, the status page, inspecting or dropping one
//! record, inbox routes' queues and outboxes' tables with their dead deliveries, and reloading
//! the config.
//!
//! It runs on its own address so that operators can firewall it away from clients: it can
//! drop records, which re-opens a key to a second execution. What it reads of the config (the
//! routes' policies, the token, the problem base) is the running config's, replaced by a reload.

mod batching;
mod counts;
mod dead;
mod histograms;
mod inbox;
mod keys;
mod outbox;
mod page;
mod problem;
mod recorder;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Json;
use serde_json::json;

use crate::config::ConfigError;
use crate::operator::scraped::ScrapedGauges;
use crate::operator::status::Status;
use crate::outbox::Outboxes;
use crate::store::Store;
use idempotency_core::proxy::ErrorChain;
use idempotency_core::Policy;
use idempotency_core::ProblemBase;
use idempotency_core::Secret;

use batching::MetricsHandle;
pub use problem::problem_types;
use problem::AdminProblem;
pub(crate) use recorder::metrics_handle;

/// What the admin endpoints reach into, from the running config: the store (with the replay
/// cache in front, so a removed record is also dropped from this replica's memory), each
/// route's policy by name (for its scope header), the token, and the problem base.
pub(crate) struct AdminView {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) policies: HashMap<String, Arc<Policy>>,
    pub(crate) token: Option<Secret>,
    pub(crate) problems: Arc<ProblemBase>,
}

/// Reloads the running proxy's config (docs/reference.md#reload): the new config's digest, or why the
/// running one stays.
pub(crate) trait Reload: Send + Sync {
    fn reload(&self) -> Pin<Box<dyn Future<Output = Result<String, ConfigError>> + Send>>;
}

#[derive(Clone)]
struct AdminState {
    view: Arc<ArcSwap<AdminView>>,
    reload: Arc<dyn Reload>,
    metrics: MetricsHandle,
    /// Gauges counted in the store, read right before each render.
    scraped: ScrapedGauges,
    status: Arc<Status>,
    /// The outbox relays: whether each can do its work (`/readyz`), and their tables.
    outboxes: Arc<Outboxes>,
}

/// The admin routes, over the running config's `view`, with the gauges `scraped` reads for
/// `/metrics`. With a token, `/metrics`, `/status`,
/// `/keys`, `/inbox`, `/outbox` and `/reload` require `Authorization: Bearer <token>`; `/healthz` and `/readyz`
/// stay open for orchestrators' probes, and `/` (the status page) for browsers, as they reveal
/// nothing: the page asks for the token and fetches its data from `/status`.
pub(crate) fn router(
    view: Arc<ArcSwap<AdminView>>,
    reload: Arc<dyn Reload>,
    status: Arc<Status>,
    outboxes: Arc<Outboxes>,
    scraped: ScrapedGauges,
) -> axum::Router {
    let state = AdminState {
        view,
        reload,
        metrics: metrics_handle(),
        scraped,
        status,
        outboxes,
    };
    let guarded = axum::Router::new()
        .route("/metrics", get(render_metrics))
        .route("/status", get(page::status))
        .route(
            "/keys/{route}/{key}",
            get(keys::inspect).delete(keys::remove),
        )
        .route("/inbox/{route}", get(inbox::queues))
        .route("/inbox/{route}/dead", get(inbox::dead))
        .route("/inbox/{route}/dead/{id}", delete(inbox::remove))
        .route("/inbox/{route}/dead/{id}/retry", post(inbox::retry))
        .route("/outbox/{name}", get(outbox::counts))
        .route(
            "/outbox/{name}/dead",
            get(outbox::dead).delete(outbox::remove_matching),
        )
        .route("/outbox/{name}/dead/retry", post(outbox::retry_matching))
        .route("/outbox/{name}/dead/{id}", delete(outbox::remove))
        .route("/outbox/{name}/dead/{id}/retry", post(outbox::retry))
        .route("/reload", post(reload_config))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
        // Around the token check, whose refusal is a problem too; the refusal says nothing
        // about what the endpoint would have answered.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            render_problems,
        ));
    axum::Router::new()
        .route("/", get(page::page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(state)
}

/// `GET /metrics`: the gauges counted in the store are read first, so that they say what the
/// admin endpoints would say now (`crate::operator::scraped`).
async fn render_metrics(State(state): State<AdminState>) -> String {
    state.scraped.read().await;
    state.metrics.render()
}

async fn require_token(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let Some(token) = state.view.load().token.clone() else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    if given.is_some_and(|given| token.matches(given)) {
        return next.run(request).await;
    }
    let mut refused = AdminProblem::Unauthorized.into_response();
    refused
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    refused
}

/// Renders the admin endpoints' own errors as problem+json (docs/reference.md#problems), under the running
/// config's problem base: the one place the admin listener turns an error into a body.
async fn render_problems(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    state.view.load().problems.render(&mut response);
    response
}

/// `POST /reload`: `200` with the new config's digest, or `400 bad-config` with the one line
/// saying why the running config stays.
async fn reload_config(State(state): State<AdminState>) -> Response {
    match state.reload.reload().await {
        Ok(digest) => Json(json!({ "digest": digest })).into_response(),
        Err(e) => AdminProblem::BadConfig(e.to_string()).into_response(),
    }
}

/// `200 ready` while the store answers and every outbox relay does its work; else `503` with
/// one line for each part that does not, naming the outbox.
async fn readyz(State(state): State<AdminState>) -> Response {
    let store = state.view.load().store.clone();
    let mut unready = Vec::new();
    if let Err(e) = store.ping().await {
        tracing::warn!(error = %ErrorChain(&e), "readiness check: store unreachable");
        unready.push("store unreachable".to_owned());
    }
    unready.extend(state.outboxes.unready());
    if unready.is_empty() {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, unready.join("\n")).into_response()
    }
}
