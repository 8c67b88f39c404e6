//! The admin listener: health, readiness, metrics, inspecting or dropping one record, and
//! reloading the config.
//!
//! It runs on its own address so that operators can firewall it away from clients: it can
//! drop records, which re-opens a key to a second execution. What it reads of the config (the
//! routes' policies, the token, the problem base) is the running config's, replaced by a reload.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::json;

use crate::config::ConfigError;
use crate::error::ProxyError;
use crate::idempotency::Policy;
use crate::model::{ClientScope, IdempotencyKey, KeyError, Record, ScopedKey, StoredBody};
use crate::problem::ProblemBase;
use crate::proxy::ReloadState;
use crate::secret::Secret;
use crate::store::Store;
use crate::telemetry;

/// The header carrying the raw value of a route's `scope_header` (e.g. the client's
/// `Authorization`), so an operator can address that client's record. A header rather than a
/// query parameter, because URLs end up in access logs.
pub(crate) const SCOPE_HEADER: &str = "x-idempotency-scope";

/// What the admin endpoints reach into, from the running config: the store (with the replay
/// cache in front, so a removed record is also dropped from this replica's memory), each
/// route's policy by name (for its scope header), the token, and the problem base.
pub(crate) struct AdminView {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) policies: HashMap<String, Arc<Policy>>,
    pub(crate) token: Option<Secret>,
    pub(crate) problems: Arc<ProblemBase>,
}

/// What the admin asks of the running proxy about its config (SPEC section 10).
pub(crate) trait ConfigControl: Send + Sync {
    /// Reloads the config: the new config's digest, or why the running one stays.
    fn reload(&self) -> Pin<Box<dyn Future<Output = Result<String, ConfigError>> + Send>>;

    /// The running config's digest, and when the last reload was asked for and how it went.
    // For the status page (SPEC section 12), which shows both; nothing else reads it yet.
    #[allow(dead_code)]
    fn state(&self) -> ReloadState;
}

#[derive(Clone)]
struct AdminState {
    view: Arc<ArcSwap<AdminView>>,
    control: Arc<dyn ConfigControl>,
    metrics: PrometheusHandle,
}

/// The admin routes, over the running config's `view`. With a token, `/metrics`, `/keys` and
/// `/reload` require `Authorization: Bearer <token>`; `/healthz` and `/readyz` stay open for
/// orchestrators' probes, as they reveal nothing.
pub(crate) fn router(
    view: Arc<ArcSwap<AdminView>>,
    control: Arc<dyn ConfigControl>,
) -> axum::Router {
    let state = AdminState {
        view,
        control,
        metrics: metrics_handle(),
    };
    let guarded = axum::Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AdminState>| async move { s.metrics.render() }),
        )
        .route("/keys/{route}/{key}", get(inspect).delete(remove))
        .route("/reload", post(reload_config))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(state)
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

/// `POST /reload`: `200` with the new config's digest, or `400 bad-config` with the one line
/// saying why the running config stays.
async fn reload_config(State(state): State<AdminState>) -> Response {
    match state.control.reload().await {
        Ok(digest) => Json(json!({ "digest": digest })).into_response(),
        Err(e) => {
            let mut refused = ProxyError::BadConfig(e.to_string()).into_response();
            state.view.load().problems.render(&mut refused);
            refused
        }
    }
}

/// The process-wide Prometheus recorder, installed on first use.
pub(crate) fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(install_recorder).clone()
}

fn install_recorder() -> PrometheusHandle {
    const BUCKETS: &[f64] = &[
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ];
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
        .expect("bucket list is not empty");
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    // Another recorder may already be installed by an embedding application; then we only render.
    let _ = metrics::set_global_recorder(recorder);
    let upkeep = handle.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(5));
        upkeep.run_upkeep();
    });
    handle
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let store = state.view.load().store.clone();
    match store.ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: store unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, "store unreachable").into_response()
        }
    }
}

/// What the key endpoints answer when they cannot do what was asked.
#[derive(Debug)]
enum AdminError {
    NoSuchRoute,
    BadKey(KeyError),
    NoRecord,
    Store(crate::store::StoreError),
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            AdminError::NoSuchRoute => (StatusCode::NOT_FOUND, "no such route".to_owned()),
            AdminError::BadKey(e) => (StatusCode::BAD_REQUEST, e.to_string()),
            AdminError::NoRecord => (StatusCode::NOT_FOUND, "no record".to_owned()),
            AdminError::Store(e) => {
                tracing::warn!(error = %e, "admin: store unavailable");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store unavailable".to_owned(),
                )
            }
        };
        (status, Json(json!({ "error": message }))).into_response()
    }
}

fn scoped_key(
    view: &AdminView,
    route: &str,
    key: String,
    headers: &HeaderMap,
) -> Result<ScopedKey, AdminError> {
    let policy = view.policies.get(route).ok_or(AdminError::NoSuchRoute)?;
    let key = IdempotencyKey::new(key).map_err(AdminError::BadKey)?;
    let scope = policy
        .scope_header
        .as_ref()
        .and_then(|_| headers.get(SCOPE_HEADER));
    let scope = scope.map(|s| ClientScope::from_secret(s.as_bytes()));
    Ok(ScopedKey::new(policy.route.clone(), scope, key))
}

async fn inspect(
    State(state): State<AdminState>,
    Path((route, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, AdminError> {
    let view = state.view.load_full();
    let key = scoped_key(&view, &route, key, &headers)?;
    let (record, expires_in) = view
        .store
        .get(&key)
        .await
        .map_err(AdminError::Store)?
        .ok_or(AdminError::NoRecord)?;
    Ok(Json(record_view(&record, expires_in)))
}

async fn remove(
    State(state): State<AdminState>,
    Path((route, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<StatusCode, AdminError> {
    let view = state.view.load_full();
    let key = scoped_key(&view, &route, key, &headers)?;
    if !view.store.remove(&key).await.map_err(AdminError::Store)? {
        return Err(AdminError::NoRecord);
    }
    tracing::info!(route = %key.route(), key = %key.log_id(), "record removed by an operator");
    Ok(StatusCode::NO_CONTENT)
}

/// What an operator may see of a record: never the body or the client's secret.
fn record_view(record: &Record, expires_in: Duration) -> serde_json::Value {
    let expires = humantime::format_rfc3339_millis(SystemTime::now() + expires_in).to_string();
    match record {
        Record::InFlight(r) => json!({
            "state": "in_flight",
            "created": humantime::format_rfc3339_millis(r.created_at).to_string(),
            "expires": expires,
            "fingerprint": r.fingerprint.short_hex(),
        }),
        Record::Completed(r) => json!({
            "state": "completed",
            "status": r.status.as_u16(),
            "created": humantime::format_rfc3339_millis(r.created_at).to_string(),
            "expires": expires,
            "fingerprint": r.fingerprint.short_hex(),
            "body_kept": matches!(r.body, StoredBody::Kept(_)),
            "body_length": match &r.body { StoredBody::Kept(b) => Some(b.len()), _ => None },
            "problem": match &r.body { StoredBody::Problem(kind) => Some(kind.as_str()), _ => None },
        }),
    }
}

/// Makes sure the request counter exists from the start, so dashboards see zeros, not gaps.
pub(crate) fn describe_metrics() {
    metrics::describe_counter!(telemetry::REQUESTS_TOTAL, "Requests by route and outcome");
    metrics::describe_counter!(
        telemetry::FAIL_OPEN_TOTAL,
        "Requests forwarded without deduplication because the store failed"
    );
    metrics::describe_histogram!(
        telemetry::STORE_SECONDS,
        metrics::Unit::Seconds,
        "Store operation latency"
    );
    metrics::describe_histogram!(
        telemetry::UPSTREAM_SECONDS,
        metrics::Unit::Seconds,
        "Upstream latency"
    );
    metrics::describe_counter!(
        telemetry::CONFIG_RELOADS_TOTAL,
        "Config reloads (SIGHUP or POST /reload), applied (ok) or refused (error)"
    );
    for result in ["ok", "error"] {
        metrics::counter!(telemetry::CONFIG_RELOADS_TOTAL, "result" => result).increment(0);
    }
}
