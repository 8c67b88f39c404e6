//! What a message becomes on its way to the upstream: `method path` with the body, the key,
//! the attempt, CloudEvents' binary-mode headers, the content type and the message's own
//! headers (SPEC'd in docs/brokers.md).

use std::time::SystemTime;

use axum_core::body::Body;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request};
use idempotency_core::backend::IdempotencyKey;

use crate::settings::ConsumerSettings;
use crate::source::Message;

/// Headers the consumer sets itself: a message's header of the same name is not passed on.
const OWN: [&str; 8] = [
    "idempotency-key",
    "delivery-attempt",
    "ce-specversion",
    "ce-id",
    "ce-source",
    "ce-type",
    "ce-time",
    "content-type",
];

/// The request for one delivery of `message` under `key`; `source` is its `ce-source`.
pub(crate) fn request_for(
    settings: &ConsumerSettings,
    message: &Message,
    key: &IdempotencyKey,
    source: &str,
) -> Request<Body> {
    let mut headers = HeaderMap::new();
    for (name, value) in &message.headers {
        let Ok(name) = HeaderName::try_from(name.as_str()) else {
            continue;
        };
        if OWN.contains(&name.as_str()) || is_broker_own(name.as_str()) {
            continue;
        }
        if let Ok(value) = HeaderValue::try_from(value.as_str()) {
            headers.append(name, value);
        }
    }
    let content_type = message
        .content_type
        .as_deref()
        .unwrap_or("application/json");
    set(&mut headers, "idempotency-key", key.as_str());
    set(
        &mut headers,
        "delivery-attempt",
        &message.attempt.to_string(),
    );
    set(&mut headers, "ce-specversion", "1.0");
    set(&mut headers, "ce-id", key.as_str());
    set(&mut headers, "ce-source", source);
    set(&mut headers, "ce-type", &message.subject);
    if let Some(time) = message.time {
        set(&mut headers, "ce-time", &rfc3339(time));
    }
    set(&mut headers, CONTENT_TYPE.as_str(), content_type);
    let mut request = Request::new(Body::from(message.body.clone()));
    *request.method_mut() = settings.method.clone();
    *request.uri_mut() = settings
        .path
        .parse()
        .unwrap_or_else(|_| "/".parse().expect("a path"));
    *request.headers_mut() = headers;
    request
}

/// The broker's bookkeeping headers, which mean nothing to the service.
fn is_broker_own(name: &str) -> bool {
    name.starts_with("nats-")
}

fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    // A value with a byte no header may hold (a subject never has one) is left out.
    if let Ok(value) = HeaderValue::try_from(value) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}
