//! HTTP destinations: `method` to the URL with the payload as the body, the row's own headers,
//! then the relay's (`Idempotency-Key`, `Delivery-Attempt`, `Outbox-Topic`,
//! `Outbox-Aggregate-Id`, `Outbox-Seq`, and Standard Webhooks' three when signing), which a
//! row's headers never replace. A `2xx` is delivered, `410 Gone` dead, anything else failed
//! (with the answer's `Retry-After`).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use idempotency_core::proxy::WebhookSigner;

use super::{Delivery, Message, Publisher};
use crate::transport::Transport;

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
static DELIVERY_ATTEMPT: HeaderName = HeaderName::from_static("delivery-attempt");
static OUTBOX_TOPIC: HeaderName = HeaderName::from_static("outbox-topic");
static OUTBOX_AGGREGATE_ID: HeaderName = HeaderName::from_static("outbox-aggregate-id");
static OUTBOX_SEQ: HeaderName = HeaderName::from_static("outbox-seq");
static WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
static WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
static WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// Publishes to one HTTP receiver through a [`Transport`].
#[derive(Debug)]
pub struct HttpPublisher {
    transport: Arc<dyn Transport>,
    url: Uri,
    method: Method,
    signer: Option<WebhookSigner>,
}

impl HttpPublisher {
    /// `method` to `url` through `transport`, signed by `signer` when set.
    pub fn new(
        transport: Arc<dyn Transport>,
        url: Uri,
        method: Method,
        signer: Option<WebhookSigner>,
    ) -> Self {
        Self {
            transport,
            url,
            method,
            signer,
        }
    }

    /// The request for `message`, signed as of `now`.
    fn request(&self, message: &Message, now: SystemTime) -> Result<Request<Bytes>, String> {
        let mut headers = HeaderMap::new();
        for (name, value) in &message.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_str(value).map_err(|e| e.to_string())?;
            headers.insert(name, value);
        }
        let visible = |text: &str| HeaderValue::from_str(text).map_err(|e| e.to_string());
        headers.insert(CONTENT_TYPE, visible(&message.content_type)?);
        let key = visible(message.id.as_str())?;
        headers.insert(IDEMPOTENCY_KEY.clone(), key.clone());
        headers.insert(DELIVERY_ATTEMPT.clone(), HeaderValue::from(message.attempt));
        headers.insert(OUTBOX_TOPIC.clone(), visible(&message.topic)?);
        if let Some(aggregate) = &message.aggregate_id {
            headers.insert(OUTBOX_AGGREGATE_ID.clone(), visible(aggregate)?);
        }
        headers.insert(OUTBOX_SEQ.clone(), HeaderValue::from(message.seq));
        if let Some(signer) = &self.signer {
            let seconds = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let signature = signer.sign(message.id.as_str(), seconds, &message.payload);
            headers.insert(WEBHOOK_ID.clone(), key);
            headers.insert(WEBHOOK_TIMESTAMP.clone(), HeaderValue::from(seconds));
            headers.insert(WEBHOOK_SIGNATURE.clone(), visible(&signature)?);
        }
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(self.url.clone())
            .body(message.payload.clone())
            .map_err(|e| format!("the request cannot be built: {e}"))?;
        *request.headers_mut() = headers;
        Ok(request)
    }
}

#[async_trait]
impl Publisher for HttpPublisher {
    async fn publish(&self, message: &Message) -> Delivery {
        let now = SystemTime::now();
        let request = match self.request(message, now) {
            Ok(request) => request,
            Err(why) => return Delivery::dead(why),
        };
        match self.transport.send(request).await {
            Ok(response) => {
                let (parts, ()) = response.into_parts();
                answered(parts.status, &parts.headers, now)
            }
            Err(e) => {
                Delivery::failed(format!("the receiver could not be reached: {}", chain(&*e)))
            }
        }
    }
}

/// What the receiver's answer makes of the attempt.
fn answered(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Delivery {
    if status.is_success() {
        return Delivery::Delivered {
            status: Some(status),
        };
    }
    let reason = format!("the receiver answered {}", status.as_u16());
    if status == StatusCode::GONE {
        let reason = "the receiver answered 410 Gone".to_owned();
        let status = Some(status);
        return Delivery::Dead { status, reason };
    }
    Delivery::Failed {
        status: Some(status),
        retry_after: retry_after(headers, now),
        reason,
    }
}

/// `Retry-After` as a wait from `now`: delay-seconds, or an HTTP date.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// An error and its causes, as one line.
pub(crate) fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !line.contains(&cause_text) {
            line.push_str(": ");
            line.push_str(&cause_text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
