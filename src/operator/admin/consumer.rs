//! A broker consumer for operators (docs/reference.md#consumers): `GET /consumers/{name}`
//! (`delivered`, `duplicates`, `retried`, `dead`, `in_flight`, `lag`), `GET
//! /consumers/{name}/dead` (the dead messages this process kept, in key order, paged by
//! `?limit=` and `?after=<key>`), `POST /consumers/{name}/dead/{key}/retry` (its record dropped
//! and the message delivered again) and `DELETE /consumers/{name}/dead/{key}`. Errors are
//! problem+json: `404 no-consumer` for a name no consumer has, `404 no-delivery` for a key
//! that names no dead message.

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde_json::json;

use super::dead::{done, Page};
use super::problem::AdminProblem;
use super::AdminState;
use idempotency_consumer::{Consumer, Counts, DeadMessage};

fn consumer(state: &AdminState, name: &str) -> Result<Consumer, AdminProblem> {
    state.consumers.get(name).ok_or(AdminProblem::NoConsumer)
}

pub(super) async fn counts(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Result<Json<Counts>, AdminProblem> {
    Ok(Json(consumer(&state, &name)?.stats().counts()))
}

pub(super) async fn dead(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, AdminProblem> {
    let consumer = consumer(&state, &name)?;
    let page = Page::parse(
        uri.query(),
        |raw| Some(raw.to_owned()),
        "after must be a key",
    )?;
    let dead = consumer
        .stats()
        .dead(usize::from(page.limit), page.after.as_deref());
    Ok(Json(serde_json::Value::Array(
        dead.iter().map(dead_view).collect(),
    )))
}

fn dead_view(message: &DeadMessage) -> serde_json::Value {
    json!({
        "key": message.key,
        "subject": message.subject,
        "reason": message.reason,
        "attempts": message.attempts,
        "dead_at_ms": message.dead_at_ms,
    })
}

pub(super) async fn retry(
    State(state): State<AdminState>,
    Path((name, key)): Path<(String, String)>,
) -> Result<StatusCode, AdminProblem> {
    let consumer = consumer(&state, &name)?;
    let answer = done(consumer.retry_dead(&key).await)?;
    tracing::info!(consumer = %name, "dead message retried by an operator");
    Ok(answer)
}

pub(super) async fn remove(
    State(state): State<AdminState>,
    Path((name, key)): Path<(String, String)>,
) -> Result<StatusCode, AdminProblem> {
    let consumer = consumer(&state, &name)?;
    let answer = done(consumer.stats().take_dead(&key).is_some())?;
    tracing::info!(consumer = %name, "dead message deleted by an operator");
    Ok(answer)
}
