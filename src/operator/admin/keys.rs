//! Inspecting or dropping one record: `GET` and `DELETE /keys/{route}/{key}`.
//!
//! A record is addressed as a client would address it: the route, the raw key, and the raw
//! scope header value when the route names one, so an operator never has to compute digests.

use idempotency_core::proxy::ErrorChain;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::json;

use super::problem::AdminProblem;
use super::{AdminState, AdminView};
use crate::store::{Removal, Removed, StoreError};
use idempotency_core::backend::{
    ClientScope, Fingerprint, IdempotencyKey, Part, Record, ScopedKey, StoredBody,
};
use idempotency_core::Problem;

/// The header carrying the raw value of a route's `scope_header` (e.g. the client's
/// `Authorization`), so an operator can address that client's record. A header rather than a
/// query parameter, because URLs end up in access logs.
pub(crate) const SCOPE_HEADER: &str = "x-idempotency-scope";

/// Why a key endpoint cannot do what was asked; the admin router renders it as problem+json.
fn unavailable(error: &StoreError) -> AdminProblem {
    tracing::warn!(error = %ErrorChain(error), "admin: store unavailable");
    Problem::StoreUnavailable.into()
}

/// `?force=true` on `DELETE`: drop the record even while its request runs. Anything but
/// `true` or `false` is refused rather than read as either.
fn forced(query: Option<&str>) -> Result<bool, AdminProblem> {
    let pairs = query.unwrap_or_default().split('&');
    match pairs
        .filter_map(|pair| pair.strip_prefix("force="))
        .next_back()
    {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(Problem::BadRequest("force must be true or false").into()),
    }
}

fn scoped_key(
    view: &AdminView,
    route: &str,
    key: String,
    headers: &HeaderMap,
) -> Result<ScopedKey, AdminProblem> {
    let policy = view.policies.get(route).ok_or(Problem::NoRoute)?;
    let key = IdempotencyKey::new(key).map_err(Problem::from)?;
    let scope = policy
        .scope_header
        .as_ref()
        .and_then(|_| headers.get(SCOPE_HEADER));
    let scope = scope.map(|s| ClientScope::from_secret(s.as_bytes()));
    Ok(ScopedKey::new(policy.route.clone(), scope, key))
}

pub(super) async fn inspect(
    State(state): State<AdminState>,
    Path((route, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, AdminProblem> {
    let view = state.view.load_full();
    let key = scoped_key(&view, &route, key, &headers)?;
    let found = view.store.get(&key).await.map_err(|e| unavailable(&e))?;
    let (record, expires_in) = found.ok_or(AdminProblem::NoRecord)?;
    Ok(Json(record_view(&record, expires_in)))
}

/// `DELETE`: a completed record is dropped; an in-flight one only with `?force=true`, decided
/// in the store's one atomic step, so a request that completes meanwhile is not dropped by
/// mistake and one that starts meanwhile is not either.
pub(super) async fn remove(
    State(state): State<AdminState>,
    Path((route, key)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<StatusCode, AdminProblem> {
    let force = forced(query.as_deref())?;
    let view = state.view.load_full();
    let key = scoped_key(&view, &route, key, &headers)?;
    let removal = if force {
        Removal::Forced
    } else {
        Removal::CompletedOnly
    };
    match view
        .store
        .remove(&key, removal)
        .await
        .map_err(|e| unavailable(&e))?
    {
        Removed::Missing => Err(AdminProblem::NoRecord),
        Removed::KeptInFlight => Err(AdminProblem::RecordInFlight),
        Removed::Removed => {
            let (route, key) = (key.route(), key.log_id());
            tracing::info!(%route, %key, force, "record removed by an operator");
            Ok(StatusCode::NO_CONTENT)
        }
    }
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
            "body_kept": matches!(r.body, StoredBody::Kept(_) | StoredBody::KeptWithTrailers { .. }),
            "body_length": match &r.body {
                StoredBody::Kept(b) | StoredBody::KeptWithTrailers { body: b, .. } => Some(b.len()),
                _ => None,
            },
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
