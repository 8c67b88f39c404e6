//! One delivery attempt: the stored request sent to the route's upstream, as the sender sent
//! it, plus `Idempotency-Key` (the parsed key, so the upstream can deduplicate too) and
//! `Delivery-Attempt` (which attempt this is). Its connection is made ready first, then it
//! waits for its turn in the route's `deliver_rate` (`rate.rs`) and goes. `deliver_timeout`
//! bounds the whole exchange, the connection and the answer's body included, the wait for the
//! turn not.

use std::time::Duration;

use axum::body::Body;
use http::{HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use tokio::time::{timeout, Instant};

use super::policy::DeliveryPolicy;
use super::rate::Turn;
use crate::net::upstream::{ClientTls, Ready, Upstream};
use idempotency_core::backend::{AttemptFailure, Delivery};
use idempotency_core::BoxError;

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
static DELIVERY_ATTEMPT: HeaderName = HeaderName::from_static("delivery-attempt");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// How much of an answer's body is read (and dropped) so its connection can be used again;
/// past it the connection is closed instead.
const DRAINED_BODY: usize = 64 * 1024;

/// How one attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttemptResult {
    /// The upstream answered a status that ends the delivery.
    Delivered(StatusCode),
    /// Anything else.
    Failed(AttemptFailure),
}

/// An attempt's result, and how long it took without its wait for a turn.
#[derive(Debug)]
pub(crate) struct Attempted {
    pub(crate) result: AttemptResult,
    pub(crate) elapsed: Duration,
}

/// Sends `delivery` (its `attempts` naming this attempt) to `upstream` in its `turn`.
pub(crate) async fn attempt(
    upstream: &Upstream,
    delivery: &Delivery,
    policy: &DeliveryPolicy,
    turn: Turn,
) -> Attempted {
    let started = Instant::now();
    let limit = policy.deliver_timeout;
    let ready = match ready(upstream, delivery, limit).await {
        Ok(ready) => ready,
        // Not sent: the turn goes to the next attempt.
        Err(result) => {
            return Attempted {
                result,
                elapsed: started.elapsed(),
            }
        }
    };
    let connecting = started.elapsed();
    turn.wait().await;
    let sent = Instant::now();
    let result = exchange(ready, limit.saturating_sub(connecting), policy).await;
    Attempted {
        result,
        elapsed: connecting + sent.elapsed(),
    }
}

/// The request on its connection, or why the attempt failed without sending it.
async fn ready(
    upstream: &Upstream,
    delivery: &Delivery,
    limit: Duration,
) -> Result<Ready, AttemptResult> {
    let request = request(delivery)
        .map_err(|e| failed(None, format!("the stored request cannot be sent: {e}")))?;
    match timeout(limit, upstream.ready(request)).await {
        Ok(Ok(ready)) => Ok(ready),
        Ok(Err(e)) => Err(failed(None, format!("upstream unavailable: {e}"))),
        Err(_) => Err(failed(None, timed_out(limit))),
    }
}

/// Sends the request ready on its connection, and reads the answer within `limit`.
async fn exchange(ready: Ready, limit: Duration, policy: &DeliveryPolicy) -> AttemptResult {
    let exchange = async {
        let response = ready.send().await?;
        let status = response.status();
        // Read to its end so the connection goes back to the pool; a long one is cut off.
        let _ = Limited::new(response.into_body(), DRAINED_BODY)
            .collect()
            .await;
        Ok::<_, BoxError>(status)
    };
    match timeout(limit, exchange).await {
        Ok(Ok(status)) if policy.delivered(status) => AttemptResult::Delivered(status),
        Ok(Ok(status)) => failed(
            Some(status),
            format!("upstream answered {}", status.as_u16()),
        ),
        Ok(Err(e)) => failed(None, format!("upstream unavailable: {e}")),
        Err(_) => failed(None, timed_out(policy.deliver_timeout)),
    }
}

fn failed(status: Option<StatusCode>, error: String) -> AttemptResult {
    AttemptResult::Failed(AttemptFailure {
        status,
        error: Some(error),
    })
}

fn timed_out(after: Duration) -> String {
    format!("no answer within {}", humantime::format_duration(after))
}

fn request(delivery: &Delivery) -> Result<Request<Body>, http::Error> {
    let stored = &delivery.request;
    let mut request = Request::builder()
        .method(stored.method.clone())
        .uri(stored.target.as_str())
        .body(Body::from(stored.body.clone()))?;
    let headers = request.headers_mut();
    *headers = stored.headers.clone();
    let key = HeaderValue::from_str(delivery.key.key().as_str()).map_err(http::Error::from)?;
    headers.insert(IDEMPOTENCY_KEY.clone(), key);
    headers.insert(
        DELIVERY_ATTEMPT.clone(),
        HeaderValue::from(delivery.attempts),
    );
    // The scheme the sender used was noted when the request was stored; the upstream client
    // would otherwise say `http`, as no client connection is behind this request.
    if headers
        .get(&X_FORWARDED_PROTO)
        .is_some_and(|p| p == "https")
    {
        request.extensions_mut().insert(ClientTls);
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, Method};

    use super::*;
    use idempotency_core::backend::{IdempotencyKey, RouteName, ScopedKey, StoredRequest};

    #[test]
    fn the_request_is_the_stored_one_with_the_key_and_the_attempt() {
        let mut headers = HeaderMap::new();
        headers.insert("x-github-delivery", HeaderValue::from_static("d-1"));
        headers.insert("idempotency-key", HeaderValue::from_static("the sender's"));
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let stored = StoredRequest {
            method: Method::PUT,
            target: "/hooks/github?x=1".into(),
            headers,
            body: Bytes::from_static(b"{}"),
        };
        let key = IdempotencyKey::new("d-1").unwrap();
        let key = ScopedKey::new(RouteName::new("github").unwrap(), None, key);
        let mut delivery = Delivery::new(key, stored);
        delivery.attempts = 3;
        let request = request(&delivery).unwrap();
        assert_eq!(request.method(), Method::PUT);
        assert_eq!(request.uri(), "/hooks/github?x=1");
        assert_eq!(request.headers()["idempotency-key"], "d-1");
        assert_eq!(request.headers()["delivery-attempt"], "3");
        assert_eq!(request.headers()["x-github-delivery"], "d-1");
        assert!(request.extensions().get::<ClientTls>().is_some());
    }
}
