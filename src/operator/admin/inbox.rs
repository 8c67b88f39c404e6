//! An inbox route's queues for operators (docs/reference.md#inbox-routes): `GET /inbox/{route}` counts them,
//! `GET /inbox/{route}/dead` lists dead deliveries (paged by `?limit=` and `?after=<id>`),
//! `POST /inbox/{route}/dead/{id}/retry` makes one pending again with a fresh attempt budget,
//! and `DELETE /inbox/{route}/dead/{id}` drops one. A dead delivery is shown by what went wrong
//! with it, never by its request's headers or body. Errors are problem+json, as every admin
//! error: `404 no-route` for a route that is not an inbox, `404 no-delivery` for an id that
//! names no dead delivery.

use idempotency_core::proxy::ErrorChain;
use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde_json::json;

use super::dead::{done, rfc3339, Page};
use super::problem::AdminProblem;
use super::{AdminState, AdminView};
use crate::store::{Inbox, StoreError};
use idempotency_core::backend::{Delivery, DeliveryId, InboxQueues, RouteName};
use idempotency_core::policy::RouteMode;
use idempotency_core::Problem;

/// The store failed; the operator gets `503 store-unavailable` and the log says why.
fn unavailable(error: &StoreError) -> AdminProblem {
    tracing::warn!(error = %ErrorChain(error), "admin: store unavailable");
    Problem::StoreUnavailable.into()
}

/// The inbox of `route`, if it is an inbox route of the running config.
fn inbox<'v>(view: &'v AdminView, route: &str) -> Result<(&'v dyn Inbox, RouteName), AdminProblem> {
    let policy = view.policies.get(route).ok_or(Problem::NoRoute)?;
    if policy.mode != RouteMode::Inbox {
        return Err(Problem::NoRoute.into());
    }
    let inbox = view.store.inbox().ok_or(Problem::NoRoute)?;
    Ok((inbox, policy.route.clone()))
}

/// An id in a path: one that cannot be an id names no delivery.
fn delivery_id(raw: &str) -> Result<DeliveryId, AdminProblem> {
    raw.parse().map_err(|_| AdminProblem::NoDelivery)
}

pub(super) async fn queues(
    State(state): State<AdminState>,
    Path(route): Path<String>,
) -> Result<Json<InboxQueues>, AdminProblem> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let queues = inbox.queues(&route, SystemTime::now()).await;
    Ok(Json(queues.map_err(|e| unavailable(&e))?))
}

pub(super) async fn dead(
    State(state): State<AdminState>,
    Path(route): Path<String>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, AdminProblem> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let id = |raw: &str| raw.parse().ok();
    let page = Page::parse(uri.query(), id, "after must be a delivery id")?;
    let dead = inbox
        .dead(&route, usize::from(page.limit), page.after)
        .await;
    let dead = dead.map_err(|e| unavailable(&e))?;
    Ok(Json(serde_json::Value::Array(
        dead.iter().map(dead_view).collect(),
    )))
}

fn dead_view(delivery: &Delivery) -> serde_json::Value {
    json!({
        "id": delivery.id.to_string(),
        "attempts": delivery.attempts,
        "last_status": delivery.last_status.map(|s| s.as_u16()),
        "last_error": delivery.last_error,
        "received_at": rfc3339(delivery.received_at),
    })
}

pub(super) async fn retry(
    State(state): State<AdminState>,
    Path((route, id)): Path<(String, String)>,
) -> Result<StatusCode, AdminProblem> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let id = delivery_id(&id)?;
    let revived = inbox.retry_dead(&route, id, SystemTime::now()).await;
    let answer = done(revived.map_err(|e| unavailable(&e))?)?;
    tracing::info!(route = %route, delivery = %id, "dead delivery retried by an operator");
    Ok(answer)
}

pub(super) async fn remove(
    State(state): State<AdminState>,
    Path((route, id)): Path<(String, String)>,
) -> Result<StatusCode, AdminProblem> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let id = delivery_id(&id)?;
    let removed = inbox.remove_dead(&route, id).await;
    let answer = done(removed.map_err(|e| unavailable(&e))?)?;
    tracing::info!(route = %route, delivery = %id, "dead delivery removed by an operator");
    Ok(answer)
}
