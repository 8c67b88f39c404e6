//! Step 4 on an inbox route (docs/reference.md#inbox-routes): instead of reserving the key and forwarding,
//! record the acknowledgement under the key and queue the request for delivery, in one store
//! step, then answer `inbox_ack_status` with `{"delivery": "<id>"}` at once. A duplicate finds
//! the acknowledgement and gets it replayed; the delivery worker (`crate::inbox`) does the rest,
//! woken through the route's [`InboxHook`](super::InboxHook).

use std::time::SystemTime;

use axum_core::body::Body;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response};

use super::admit::KeyedRequest;
use super::context::Context;
use super::inbox_hook::InboxHook;
use crate::model::{CompletedRecord, Delivery, FencingToken, StoredBody, StoredRequest};
use crate::outcome::Outcome;
use crate::store::{Acceptance, StoreError};

/// What an accept came to, for the flow to answer.
pub(super) enum Accepted {
    /// Queued now: the acknowledgement to send.
    Queued(Response<Body>),
    /// The key was there already: what the flow does with any existing record.
    Existing(crate::model::Record),
}

/// Records the acknowledgement and queues the request, in one store step.
pub(super) async fn accept(ctx: &Context, request: &KeyedRequest) -> Result<Accepted, StoreError> {
    // The layer's builder refuses an inbox route without both; a store swapped underneath
    // is still answered, not a panic.
    let (Some(inbox), Some(hook)) = (ctx.store.inbox(), &ctx.inbox) else {
        let reason = "inbox routes need a store that supports them";
        return Err(StoreError::unavailable(reason));
    };
    let delivery = Delivery::new(request.key.clone(), stored(request, hook));
    let ack = acknowledgement(ctx, request, &delivery);
    let started = tokio::time::Instant::now();
    let accepted = inbox.accept(&request.key, &ack, &delivery, ctx.policy.ttl);
    let accepted = accepted.await;
    ctx.metrics.reserved(started.elapsed());
    match accepted? {
        Acceptance::Queued => {
            hook.accepted.increment(1);
            hook.wake.notify_one();
            Ok(Accepted::Queued(answer(ack)))
        }
        Acceptance::Existing(record) => Ok(Accepted::Existing(record)),
    }
}

/// The request as it will be sent: method, path and query, end-to-end headers, body.
fn stored(request: &KeyedRequest, hook: &InboxHook) -> StoredRequest {
    let parts = &request.parts;
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    StoredRequest {
        method: parts.method.clone(),
        target: target.to_owned(),
        headers: (hook.stored_headers)(parts),
        body: Bytes::copy_from_slice(&request.body),
    }
}

fn acknowledgement(ctx: &Context, request: &KeyedRequest, delivery: &Delivery) -> CompletedRecord {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body = format!("{{\"delivery\":\"{}\"}}", delivery.id);
    CompletedRecord {
        fingerprint: request.fingerprint,
        token: FencingToken::generate(),
        created_at: SystemTime::now(),
        status: ctx.policy.inbox_ack_status,
        headers,
        body: StoredBody::Kept(Bytes::from(body)),
    }
}

/// The first answer: the acknowledgement as stored, not marked as a replay.
fn answer(ack: CompletedRecord) -> Response<Body> {
    let StoredBody::Kept(body) = ack.body else {
        return Response::new(Body::empty());
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = ack.status;
    *response.headers_mut() = ack.headers;
    response
}

/// How an accepted request is counted: stored for its upstream, as a forwarded first request
/// is stored with its outcome.
pub(super) const QUEUED: Outcome = Outcome::Forwarded;
