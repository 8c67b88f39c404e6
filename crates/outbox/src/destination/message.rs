//! The outgoing message of one attempt, whatever carries it: the row's id, topic, aggregate,
//! `seq`, the attempt's number, the payload, its content type and the row's own headers.
//!
//! A row that cannot make a message at all (an id that cannot be a key, a null payload,
//! `headers` that are not an object of strings naming valid headers) is refused here with the
//! reason, which becomes its `last_error` when it is marked dead.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};

use crate::names::EventId;
use crate::row::ClaimedRow;
use crate::table::PayloadKind;

/// Headers that frame or route an HTTP request: the HTTP client writes them, and a row setting
/// one would make a request its receiver reads otherwise than the relay sent it. Refused for
/// every destination, so a row means the same wherever its topic goes.
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

/// One attempt's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The row's id: `Idempotency-Key`, `Nats-Msg-Id`, AMQP `message_id`.
    pub id: EventId,
    /// The row's topic: picks the destination; the subject's tail or the routing key.
    pub topic: String,
    /// The row's aggregate, when set (`Outbox-Aggregate-Id`).
    pub aggregate_id: Option<String>,
    /// The row's `seq` (`Outbox-Seq`).
    pub seq: i64,
    /// This attempt's number, 1 on the first (`Delivery-Attempt`).
    pub attempt: u32,
    /// The payload, as the body.
    pub payload: Bytes,
    /// The content type: the row's `Content-Type` header, else the payload column's default.
    pub content_type: String,
    /// The row's other headers, in the row's own spelling; a publisher writes its own after
    /// them, so a row never replaces the relay's.
    pub headers: Vec<(String, String)>,
}

/// Why a row cannot make a message. Its text becomes the row's `last_error` when the row is
/// marked dead, so it names the column and the value at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unsendable {
    /// The id cannot be a key (`Idempotency-Key`, `Nats-Msg-Id`, `message_id`).
    #[error(transparent)]
    Id(#[from] crate::names::NameError),
    /// The payload column is null.
    #[error("the payload is null")]
    NullPayload,
    /// The topic cannot be a header value.
    #[error("topic {0:?} cannot be sent as Outbox-Topic")]
    Topic(String),
    /// The aggregate id cannot be a header value.
    #[error("aggregate_id {0:?} cannot be sent as Outbox-Aggregate-Id")]
    AggregateId(String),
    /// The `headers` column is neither null nor a JSON object of strings.
    #[error("headers is not a JSON object of strings")]
    HeadersNotAnObject,
    /// A value of the `headers` column is not a string.
    #[error("headers: the value of {0:?} is not a string")]
    HeaderNotAString(String),
    /// A name of the `headers` column is not a header name.
    #[error("headers: {0:?} is not a header name")]
    HeaderName(String),
    /// A header of the `headers` column frames the request, which only the HTTP client writes.
    #[error("headers: {0:?} is written by the HTTP client, never by a row")]
    FramingHeader(String),
    /// A value of the `headers` column cannot be a header value.
    #[error("headers: the value of {0:?} is not a valid header value")]
    HeaderValue(String),
}

/// The message of `row`'s attempt, or why the row cannot be sent.
pub(crate) fn build(payload_kind: PayloadKind, row: &ClaimedRow) -> Result<Message, Unsendable> {
    let id = EventId::new(row.id.as_str())?;
    let Some(payload) = &row.payload else {
        return Err(Unsendable::NullPayload);
    };
    HeaderValue::from_str(&row.topic).map_err(|_| Unsendable::Topic(row.topic.clone()))?;
    if let Some(aggregate) = &row.aggregate_id {
        HeaderValue::from_str(aggregate).map_err(|_| Unsendable::AggregateId(aggregate.clone()))?;
    }
    let mut headers = row_headers(row.headers.as_deref())?;
    let content_type = match headers
        .iter()
        .position(|(name, _)| name.eq_ignore_ascii_case("content-type"))
    {
        Some(at) => headers.remove(at).1,
        None => payload_kind.content_type().to_owned(),
    };
    Ok(Message {
        id,
        topic: row.topic.clone(),
        aggregate_id: row.aggregate_id.clone(),
        seq: row.seq,
        attempt: row.attempt_number(),
        payload: Bytes::copy_from_slice(payload),
        content_type,
        headers,
    })
}

/// The `headers` column: null, or a JSON object whose every value is a string, naming headers
/// a request may carry.
fn row_headers(column: Option<&str>) -> Result<Vec<(String, String)>, Unsendable> {
    let Some(text) = column else {
        return Ok(Vec::new());
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|_| Unsendable::HeadersNotAnObject)?;
    let object = match value {
        serde_json::Value::Null => return Ok(Vec::new()),
        serde_json::Value::Object(object) => object,
        _ => return Err(Unsendable::HeadersNotAnObject),
    };
    let mut headers = Vec::with_capacity(object.len());
    for (name, value) in object {
        let serde_json::Value::String(value) = value else {
            return Err(Unsendable::HeaderNotAString(name));
        };
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            return Err(Unsendable::HeaderName(name));
        };
        if FRAMING.contains(&header.as_str()) {
            return Err(Unsendable::FramingHeader(name));
        }
        if HeaderValue::from_str(&value).is_err() {
            return Err(Unsendable::HeaderValue(name));
        }
        headers.push((name, value));
    }
    Ok(headers)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    pub(crate) fn row(headers: Option<&str>) -> ClaimedRow {
        ClaimedRow {
            id: "evt_1".into(),
            topic: "payment.confirmed".into(),
            aggregate_id: Some("order-7".into()),
            payload: Some(br#"{"order":7}"#.to_vec()),
            headers: headers.map(str::to_owned),
            attempt: 3,
            seq: 41,
            age: Duration::ZERO,
            budget_age: Duration::ZERO,
            claimed: Instant::now(),
        }
    }

    #[test]
    fn a_message_carries_the_row_and_its_content_type() {
        let headers = r#"{"X-Tenant": "t1", "Content-Type": "application/cloudevents+json"}"#;
        let message = build(PayloadKind::Json, &row(Some(headers))).unwrap();
        assert_eq!(message.id.as_str(), "evt_1");
        assert_eq!(message.aggregate_id.as_deref(), Some("order-7"));
        assert_eq!((message.seq, message.attempt), (41, 3));
        assert_eq!(message.content_type, "application/cloudevents+json");
        assert_eq!(message.headers, vec![("X-Tenant".into(), "t1".into())]);
        let plain = build(PayloadKind::Bytes, &row(None)).unwrap();
        assert_eq!(plain.content_type, "application/octet-stream");
    }

    #[test]
    fn a_row_that_cannot_be_sent_says_why() {
        let why = |row: &ClaimedRow| build(PayloadKind::Json, row).unwrap_err().to_string();
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
        let mut broken = row(None);
        broken.aggregate_id = Some("line\nbreak".into());
        assert!(why(&broken).contains("Outbox-Aggregate-Id"));
    }
}
