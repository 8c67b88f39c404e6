//! An outbox's table for operators (docs/reference.md#outbox-relays): `GET /outbox/{name}`
//! counts it, `GET /outbox/{name}/dead` lists the dead rows in `seq` order (paged by `?limit=`
//! and `?after=<id>`), `POST /outbox/{name}/dead/{id}/retry` makes one pending again with a
//! fresh attempt budget, and `DELETE /outbox/{name}/dead/{id}` deletes one;
//! `POST /outbox/{name}/dead/retry` and `DELETE /outbox/{name}/dead` do the same to the dead
//! rows matching `?topic=`, `?aggregate_id=` and `?before=` (RFC 3339, on `created_at`), at
//! most `?limit=` (default 1000, at most 10000) oldest first, and answer how many. A dead row is shown
//! by what went wrong with it, never by its payload or headers. Errors are problem+json, as
//! every admin error: `404 no-outbox` for a name no outbox has, `404 no-delivery` for an id
//! that names no dead row, `400 bad-request` for a bad query, and `503 outbox-unavailable`
//! while the outbox's database does not answer.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use idempotency_core::proxy::ErrorChain;
use serde_json::json;

use super::dead::{done, rfc3339, Page};
use super::problem::AdminProblem;
use super::AdminState;
use idempotency_core::Problem;
use idempotency_outbox::{DeadFilter, DeadRow, EventId, Outbox, OutboxCounts, OutboxError};
use percent_encoding::percent_decode_str;

/// Rows a bulk call takes unless `?limit=` says fewer, and the most it may say.
const BULK_DEFAULT: u32 = 1000;
const BULK_MAX: u32 = 10_000;

/// The outbox named `name` in the config.
fn outbox(state: &AdminState, name: &str) -> Result<Outbox, AdminProblem> {
    state.outboxes.get(name).ok_or(AdminProblem::NoOutbox)
}

/// The database failed; the operator gets `503 outbox-unavailable` and the log says why.
fn unavailable(outbox: &Outbox, error: &OutboxError) -> AdminProblem {
    tracing::warn!(outbox = %outbox.name(), error = %ErrorChain(error), "admin: outbox database unavailable");
    AdminProblem::OutboxUnavailable
}

/// An id in a path: one that cannot be an event's id names no dead row.
fn event_id(raw: String) -> Result<EventId, AdminProblem> {
    EventId::new(raw).map_err(|_| AdminProblem::NoDelivery)
}

pub(super) async fn counts(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Result<Json<OutboxCounts>, AdminProblem> {
    let outbox = outbox(&state, &name)?;
    let counts = outbox.counts().await;
    Ok(Json(counts.map_err(|e| unavailable(&outbox, &e))?))
}

pub(super) async fn dead(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, AdminProblem> {
    let outbox = outbox(&state, &name)?;
    let id = |raw: &str| EventId::new(raw).ok();
    let page = Page::parse(uri.query(), id, "after must be an event id")?;
    let after = page.after.as_ref().map(EventId::as_str);
    let dead = outbox.dead(u32::from(page.limit), after).await;
    let dead = dead.map_err(|e| unavailable(&outbox, &e))?;
    // The row `after` named is gone (retried and delivered, or deleted): where the next page
    // starts is unknown, and an empty page would say the list ended.
    let dead = dead.ok_or(Problem::BadRequest(
        "after names no row of this outbox; list again from the start",
    ))?;
    Ok(Json(serde_json::Value::Array(
        dead.iter().map(dead_view).collect(),
    )))
}

fn dead_view(row: &DeadRow) -> serde_json::Value {
    json!({
        "id": row.id,
        "topic": row.topic,
        "aggregate_id": row.aggregate_id,
        "attempts": row.attempts,
        "last_status": row.last_status,
        "last_error": row.last_error,
        "created_at": rfc3339(row.created_at),
    })
}

pub(super) async fn retry(
    State(state): State<AdminState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode, AdminProblem> {
    let outbox = outbox(&state, &name)?;
    let id = event_id(id)?;
    let revived = outbox.retry_dead(id.as_str()).await;
    let answer = done(revived.map_err(|e| unavailable(&outbox, &e))?)?;
    tracing::info!(outbox = %outbox.name(), id = %id, "dead outbox row retried by an operator");
    Ok(answer)
}

pub(super) async fn remove(
    State(state): State<AdminState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode, AdminProblem> {
    let outbox = outbox(&state, &name)?;
    let id = event_id(id)?;
    let deleted = outbox.delete_dead(id.as_str()).await;
    let answer = done(deleted.map_err(|e| unavailable(&outbox, &e))?)?;
    tracing::info!(outbox = %outbox.name(), id = %id, "dead outbox row deleted by an operator");
    Ok(answer)
}

/// Reads a bulk call's filters; an unknown parameter or a bad value is `400 bad-request`.
fn filter(query: Option<&str>) -> Result<DeadFilter, AdminProblem> {
    let mut filter = DeadFilter {
        limit: BULK_DEFAULT,
        ..DeadFilter::default()
    };
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| Problem::BadRequest("query values must be UTF-8"))?
            .into_owned();
        match name {
            "topic" => filter.topic = Some(value),
            "aggregate_id" => filter.aggregate_id = Some(value),
            "before" => {
                let before = humantime::parse_rfc3339_weak(&value)
                    .map_err(|_| Problem::BadRequest("before must be an RFC 3339 time"))?;
                filter.before = Some(before);
            }
            "limit" => {
                filter.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=BULK_MAX).contains(n))
                    .ok_or(Problem::BadRequest("limit must be 1 to 10000"))?;
            }
            _ => {
                return Err(Problem::BadRequest(
                    "the filters are topic, aggregate_id, before and limit",
                )
                .into())
            }
        }
    }
    Ok(filter)
}

pub(super) async fn retry_matching(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, AdminProblem> {
    let outbox = outbox(&state, &name)?;
    let filter = filter(uri.query())?;
    let retried = outbox.retry_dead_matching(&filter).await;
    let retried = retried.map_err(|e| unavailable(&outbox, &e))?;
    tracing::info!(outbox = %outbox.name(), rows = retried, ?filter, "dead outbox rows retried by an operator");
    Ok(Json(json!({ "retried": retried })))
}

pub(super) async fn remove_matching(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, AdminProblem> {
    let outbox = outbox(&state, &name)?;
    let filter = filter(uri.query())?;
    let deleted = outbox.delete_dead_matching(&filter).await;
    let deleted = deleted.map_err(|e| unavailable(&outbox, &e))?;
    tracing::info!(outbox = %outbox.name(), rows = deleted, ?filter, "dead outbox rows deleted by an operator");
    Ok(Json(json!({ "deleted": deleted })))
}
