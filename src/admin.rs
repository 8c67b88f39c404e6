//! The admin listener: health, readiness, metrics, and inspecting or dropping one record.
//!
//! It runs on its own address so that operators can firewall it away from clients: it can
//! drop records, which re-opens a key to a second execution.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Json;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::json;

use crate::idempotency::Policy;
use crate::model::{
    ClientScope, Fingerprint, IdempotencyKey, KeyError, Part, Record, ScopedKey, StoredBody,
};
use crate::secret::Secret;
use crate::store::Store;
use crate::telemetry;

/// The header carrying the raw value of a route's `scope_header` (e.g. the client's
/// `Authorization`), so an operator can address that client's record. A header rather than a
/// query parameter, because URLs end up in access logs.
pub(crate) const SCOPE_HEADER: &str = "x-idempotency-scope";

/// What the admin endpoints reach into: the store (with the replay cache in front, so a removed
/// record is also dropped from this replica's memory) and each route's policy (for its scope
/// header).
pub(crate) struct Records {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) policies: Vec<Arc<Policy>>,
}

#[derive(Clone)]
struct AdminState {
    store: Arc<dyn Store>,
    policies: Arc<HashMap<String, Arc<Policy>>>,
    metrics: PrometheusHandle,
}

/// The admin routes, over the proxy's store and route policies. With a `token`, `/metrics`
/// and `/keys` require `Authorization: Bearer <token>`; `/healthz` and `/readyz` stay open for
/// orchestrators' probes, as they reveal nothing.
pub(crate) fn router(records: Records, token: Option<Secret>) -> axum::Router {
    let policies = records
        .policies
        .into_iter()
        .map(|p| (p.route.as_str().to_owned(), p));
    let state = AdminState {
        store: records.store,
        policies: Arc::new(policies.collect()),
        metrics: metrics_handle(),
    };
    let guarded = axum::Router::new()
        .route(
            "/metrics",
            get(|State(s): State<AdminState>| async move { s.metrics.render() }),
        )
        .route("/keys/{route}/{key}", get(inspect).delete(remove))
        .route_layer(middleware::from_fn_with_state(
            token.map(Arc::new),
            require_token,
        ));
    axum::Router::new()
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
    match state.store.ping().await {
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
    state: &AdminState,
    route: &str,
    key: String,
    headers: &HeaderMap,
) -> Result<ScopedKey, AdminError> {
    let policy = state.policies.get(route).ok_or(AdminError::NoSuchRoute)?;
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
    let key = scoped_key(&state, &route, key, &headers)?;
    let (record, expires_in) = state
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
    let key = scoped_key(&state, &route, key, &headers)?;
    if !state.store.remove(&key).await.map_err(AdminError::Store)? {
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
            "fingerprint_parts": part_digests(&r.fingerprint),
        }),
        Record::Completed(r) => json!({
            "state": "completed",
            "status": r.status.as_u16(),
            "created": humantime::format_rfc3339_millis(r.created_at).to_string(),
            "expires": expires,
            "fingerprint": r.fingerprint.short_hex(),
            "fingerprint_parts": part_digests(&r.fingerprint),
            "body_kept": matches!(r.body, StoredBody::Kept(_)),
            "body_length": match &r.body { StoredBody::Kept(b) => Some(b.len()), _ => None },
            "problem": match &r.body { StoredBody::Problem(kind) => Some(kind.as_str()), _ => None },
        }),
    }
}

/// The kept digest of each part in hex, or `null` for a record stored before they existed.
fn part_digests(fingerprint: &Fingerprint) -> serde_json::Value {
    let Some(parts) = fingerprint.parts() else {
        return serde_json::Value::Null;
    };
    let hex = Part::ALL.map(|part| (part.as_str().to_owned(), json!(parts.hex(part))));
    serde_json::Value::Object(hex.into_iter().collect())
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
}
