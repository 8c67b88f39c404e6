//! The request an attempt sends: `method` to the topic's URL, the payload as the body, the
//! row's own headers, then the relay's (`Idempotency-Key`, `Delivery-Attempt`, `Outbox-Topic`,
//! and Standard Webhooks' three when signing), which a row's headers never replace.
//!
//! A row that cannot make a request at all is refused here with the reason, which becomes its
//! `last_error` when it is marked dead.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Request};

use crate::config::OutboxConfig;
use crate::names::EventId;
use crate::row::ClaimedRow;
use crate::table::PayloadKind;

static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
static DELIVERY_ATTEMPT: HeaderName = HeaderName::from_static("delivery-attempt");
static OUTBOX_TOPIC: HeaderName = HeaderName::from_static("outbox-topic");
static WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
static WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
static WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// Headers that frame or route the request: the HTTP client writes them, and a row setting one
/// would make a request its receiver reads otherwise than the relay sent it.
const FRAMING: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// The request for `row`'s attempt, or why the row cannot be sent.
pub(crate) fn build(
    config: &OutboxConfig,
    payload_kind: PayloadKind,
    row: &ClaimedRow,
    now: SystemTime,
) -> Result<Request<Bytes>, String> {
    let id = EventId::new(row.id.as_str())?;
    let Some(payload) = &row.payload else {
        return Err("the payload is null".to_owned());
    };
    let Some(url) = config.destination(&row.topic) else {
        return Err(format!(
            "no destination for topic {:?}: it has no line in topics, and there is no deliver_to",
            row.topic
        ));
    };
    let topic = HeaderValue::from_str(&row.topic)
        .map_err(|_| format!("topic {:?} cannot be sent as Outbox-Topic", row.topic))?;
    let mut headers = row_headers(row.headers.as_deref())?;
    if !headers.contains_key(CONTENT_TYPE) {
        let default = HeaderValue::from_static(payload_kind.content_type());
        headers.insert(CONTENT_TYPE, default);
    }
    let key = HeaderValue::from_str(id.as_str()).expect("an event id is visible ASCII");
    headers.insert(IDEMPOTENCY_KEY.clone(), key.clone());
    headers.insert(
        DELIVERY_ATTEMPT.clone(),
        HeaderValue::from(row.attempt_number()),
    );
    headers.insert(OUTBOX_TOPIC.clone(), topic);
    if let Some(signer) = &config.signer {
        let seconds = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let signature = signer.sign(id.as_str(), seconds, payload);
        headers.insert(WEBHOOK_ID.clone(), key);
        headers.insert(WEBHOOK_TIMESTAMP.clone(), HeaderValue::from(seconds));
        let signature = HeaderValue::from_str(&signature).expect("base64 is visible ASCII");
        headers.insert(WEBHOOK_SIGNATURE.clone(), signature);
    }
    let mut request = Request::builder()
        .method(config.method.clone())
        .uri(url.clone())
        .body(Bytes::copy_from_slice(payload))
        .map_err(|e| format!("the request cannot be built: {e}"))?;
    *request.headers_mut() = headers;
    Ok(request)
}

/// The `headers` column: null, or a JSON object whose every value is a string, naming headers
/// a request may carry.
fn row_headers(column: Option<&str>) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    let Some(text) = column else {
        return Ok(headers);
    };
    let not_an_object = || "headers is not a JSON object of strings".to_owned();
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| not_an_object())?;
    let object = match value {
        serde_json::Value::Null => return Ok(headers),
        serde_json::Value::Object(object) => object,
        _ => return Err(not_an_object()),
    };
    for (name, value) in object {
        let serde_json::Value::String(value) = value else {
            return Err(format!("headers: the value of {name:?} is not a string"));
        };
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("headers: {name:?} is not a header name"))?;
        if FRAMING.contains(&header.as_str()) {
            return Err(format!(
                "headers: {name:?} is written by the HTTP client, never by a row"
            ));
        }
        let value = HeaderValue::from_str(&value)
            .map_err(|_| format!("headers: the value of {name:?} is not a valid header value"))?;
        headers.insert(header, value);
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idempotency_delivery::signing::WebhookSigner;
    use idempotency_delivery::Secret;
    use tokio::time::Instant;

    use super::*;
    use crate::names::OutboxName;

    fn config() -> OutboxConfig {
        let mut config = OutboxConfig::new(OutboxName::new("payments").unwrap());
        config.deliver_to = Some("http://127.0.0.1:9/events?v=1".parse().unwrap());
        config
    }

    fn row(headers: Option<&str>) -> ClaimedRow {
        ClaimedRow {
            id: "evt_1".into(),
            topic: "payment.confirmed".into(),
            aggregate_id: None,
            payload: Some(br#"{"order":7}"#.to_vec()),
            headers: headers.map(str::to_owned),
            attempt: 3,
            age: Duration::ZERO,
            budget_age: Duration::ZERO,
            claimed: Instant::now(),
        }
    }

    #[test]
    fn the_relays_headers_come_after_and_over_the_rows() {
        let headers = r#"{"Idempotency-Key": "mine", "X-Tenant": "t1", "Content-Type": "application/cloudevents+json"}"#;
        let request = build(
            &config(),
            PayloadKind::Json,
            &row(Some(headers)),
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(request.uri(), "http://127.0.0.1:9/events?v=1");
        assert_eq!(request.method(), http::Method::POST);
        let headers = request.headers();
        assert_eq!(headers["idempotency-key"], "evt_1");
        assert_eq!(headers["delivery-attempt"], "3");
        assert_eq!(headers["outbox-topic"], "payment.confirmed");
        assert_eq!(headers["x-tenant"], "t1");
        assert_eq!(headers["content-type"], "application/cloudevents+json");
        assert!(headers.get("webhook-signature").is_none());
        assert_eq!(request.body().as_ref(), br#"{"order":7}"#);
        let plain = build(&config(), PayloadKind::Bytes, &row(None), SystemTime::now()).unwrap();
        assert_eq!(plain.headers()["content-type"], "application/octet-stream");
    }

    #[test]
    fn a_signed_request_carries_the_three_webhook_headers() {
        std::env::set_var(
            "OUTBOX_REQUEST_TEST_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        );
        let secret = Secret::resolve("env:OUTBOX_REQUEST_TEST_SECRET").unwrap();
        let mut config = config();
        config.signer = Some(WebhookSigner::new(&secret).unwrap());
        let at = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
        let request = build(&config, PayloadKind::Json, &row(None), at).unwrap();
        let headers = request.headers();
        assert_eq!(headers["webhook-id"], "evt_1");
        assert_eq!(headers["webhook-timestamp"], "1614265330");
        let expected = config
            .signer
            .unwrap()
            .sign("evt_1", 1_614_265_330, br#"{"order":7}"#);
        assert_eq!(headers["webhook-signature"], expected.as_str());
    }

    #[test]
    fn a_row_that_cannot_be_sent_says_why() {
        let at = SystemTime::now();
        let why = |row: &ClaimedRow| build(&config(), PayloadKind::Json, row, at).unwrap_err();
        let mut null = row(None);
        null.payload = None;
        assert_eq!(why(&null), "the payload is null");
        assert!(why(&row(Some("[1]"))).contains("not a JSON object"));
        assert!(why(&row(Some(r#"{"a": 1}"#))).contains("\"a\" is not a string"));
        assert!(why(&row(Some(r#"{"Content-Length": "9"}"#))).contains("HTTP client"));
        assert!(why(&row(Some(r#"{"a b": "c"}"#))).contains("not a header name"));
        let mut spaced = row(None);
        spaced.id = "evt 1".into();
        assert!(why(&spaced).contains("Idempotency-Key"));
        let mut nowhere = config();
        nowhere.deliver_to = None;
        let refused = build(&nowhere, PayloadKind::Json, &row(None), at).unwrap_err();
        assert!(
            refused.contains("no destination for topic \"payment.confirmed\""),
            "{refused}"
        );
    }
}
