//! An inbox route's queues for operators (SPEC section 11): `GET /inbox/{route}` counts them,
//! `GET /inbox/{route}/dead` lists dead deliveries (paged by `?limit=` and `?after=<id>`),
//! `POST /inbox/{route}/dead/{id}/retry` makes one pending again with a fresh attempt budget,
//! and `DELETE /inbox/{route}/dead/{id}` drops one. A dead delivery is shown by what went wrong
//! with it, never by its request's headers or body.

use std::time::SystemTime;

use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde_json::json;

use super::keys::AdminError;
use super::{AdminState, AdminView};
use crate::idempotency::policy::RouteMode;
use crate::model::{Delivery, DeliveryId, InboxQueues, RouteName};
use crate::store::Inbox;

/// Dead deliveries listed when `limit` is not given, and the most one page may hold.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// The query of `GET /inbox/{route}/dead`: `limit` and `after`, plain digits and hex, which
/// need no percent-decoding.
#[derive(Debug, Default)]
struct Page {
    limit: Option<usize>,
    after: Option<DeliveryId>,
}

impl Page {
    fn parse(query: Option<&str>) -> Result<Self, AdminError> {
        let mut page = Page::default();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "limit" => {
                    let limit = value.parse().ok().filter(|l| (1..=MAX_PAGE).contains(l));
                    page.limit = Some(limit.ok_or(AdminError::BadPage("limit"))?);
                }
                "after" => {
                    page.after = Some(value.parse().map_err(|_| AdminError::BadPage("after"))?);
                }
                _ => {}
            }
        }
        Ok(page)
    }
}

/// The inbox of `route`, if it is an inbox route of the running config.
fn inbox<'v>(view: &'v AdminView, route: &str) -> Result<(&'v dyn Inbox, RouteName), AdminError> {
    let policy = view.policies.get(route).ok_or(AdminError::NoSuchRoute)?;
    if policy.mode != RouteMode::Inbox {
        return Err(AdminError::NoSuchRoute);
    }
    let inbox = view.store.inbox().ok_or(AdminError::NoSuchRoute)?;
    Ok((inbox, policy.route.clone()))
}

/// An id in a path: one that cannot be an id names no delivery.
fn delivery_id(raw: &str) -> Result<DeliveryId, AdminError> {
    raw.parse().map_err(|_| AdminError::NoDelivery)
}

pub(super) async fn queues(
    State(state): State<AdminState>,
    Path(route): Path<String>,
) -> Result<Json<InboxQueues>, AdminError> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let queues = inbox.queues(&route, SystemTime::now()).await;
    Ok(Json(queues.map_err(AdminError::Store)?))
}

pub(super) async fn dead(
    State(state): State<AdminState>,
    Path(route): Path<String>,
    uri: Uri,
) -> Result<Json<serde_json::Value>, AdminError> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let page = Page::parse(uri.query())?;
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    let dead = inbox.dead(&route, limit, page.after).await;
    let dead = dead.map_err(AdminError::Store)?;
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
        "received_at": humantime::format_rfc3339_millis(delivery.received_at).to_string(),
    })
}

pub(super) async fn retry(
    State(state): State<AdminState>,
    Path((route, id)): Path<(String, String)>,
) -> Result<StatusCode, AdminError> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let id = delivery_id(&id)?;
    let revived = inbox.retry_dead(&route, id, SystemTime::now()).await;
    if !revived.map_err(AdminError::Store)? {
        return Err(AdminError::NoDelivery);
    }
    tracing::info!(route = %route, delivery = %id, "dead delivery retried by an operator");
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn remove(
    State(state): State<AdminState>,
    Path((route, id)): Path<(String, String)>,
) -> Result<StatusCode, AdminError> {
    let view = state.view.load_full();
    let (inbox, route) = inbox(&view, &route)?;
    let id = delivery_id(&id)?;
    if !inbox
        .remove_dead(&route, id)
        .await
        .map_err(AdminError::Store)?
    {
        return Err(AdminError::NoDelivery);
    }
    tracing::info!(route = %route, delivery = %id, "dead delivery removed by an operator");
    Ok(StatusCode::NO_CONTENT)
}
