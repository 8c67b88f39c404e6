//! Inspecting or dropping one record: `GET` and `DELETE /keys/{route}/{key}`; and what every
//! admin endpoint answers when it cannot do what was asked ([`AdminError`]).
//!
//! A record is addressed as a client would address it: the route, the raw key, and the raw
//! scope header value when the route names one, so an operator never has to compute digests.

use std::time::{Duration, SystemTime};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::{AdminState, AdminView};
use crate::model::{
    ClientScope, Fingerprint, IdempotencyKey, KeyError, Part, Record, ScopedKey, StoredBody,
};

/// The header carrying the raw value of a route's `scope_header` (e.g. the client's
/// `Authorization`), so an operator can address that client's record. A header rather than a
/// query parameter, because URLs end up in access logs.
pub(crate) const SCOPE_HEADER: &str = "x-idempotency-scope";

/// What the key endpoints answer when they cannot do what was asked.
#[derive(Debug)]
pub(super) enum AdminError {
    NoSuchRoute,
    BadKey(KeyError),
    NoRecord,
    /// No dead delivery of that id on the route.
    NoDelivery,
    /// A bad paging parameter, by name.
    BadPage(&'static str),
    Store(crate::store::StoreError),
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            AdminError::NoSuchRoute => (StatusCode::NOT_FOUND, "no such route".to_owned()),
            AdminError::BadKey(e) => (StatusCode::BAD_REQUEST, e.to_string()),
            AdminError::NoRecord => (StatusCode::NOT_FOUND, "no record".to_owned()),
            AdminError::NoDelivery => (StatusCode::NOT_FOUND, "no such dead delivery".to_owned()),
            AdminError::BadPage(name) => (StatusCode::BAD_REQUEST, format!("bad {name}")),
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

pub(super) async fn inspect(
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

pub(super) async fn remove(
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
