//! Turning responses into records and records back into responses.

use std::time::SystemTime;

use axum::body::Body;
use bytes::Bytes;
use http::{response::Parts, HeaderName, HeaderValue, Response};

use super::fingerprint::Fingerprint;
use super::record::{CompletedRecord, FencingToken, StoredBody};
use crate::error::{ProblemBase, ProxyError};
use crate::headers::storable_response_headers;

/// The header that marks an answer as coming from the store.
pub static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// What the store keeps of a response: its status, storable headers, and the body if kept.
pub fn completed_record(
    parts: &Parts,
    body: StoredBody,
    fingerprint: Fingerprint,
    token: FencingToken,
    exclude: &[HeaderName],
) -> CompletedRecord {
    let record = CompletedRecord {
        fingerprint,
        token,
        created_at: SystemTime::now(),
        status: parts.status,
        headers: storable_response_headers(&parts.headers, exclude),
        body,
    };
    // Kept in memory for a while (memory store, replay cache): it must not pin the read buffer.
    record.detached()
}

/// The stored answer, byte for byte, marked as a replay; a tombstone gets `410`.
pub fn replay(record: CompletedRecord, base: &ProblemBase) -> Response<Body> {
    let body = match record.body {
        StoredBody::Kept(body) => body,
        StoredBody::NotKept => return ProxyError::ResponseNotKept.to_response(base),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = record.status;
    *response.headers_mut() = record.headers;
    response.headers_mut().insert(
        IDEMPOTENT_REPLAYED.clone(),
        HeaderValue::from_static("true"),
    );
    response
}

/// Splits a buffered problem response so it can be stored like an upstream answer.
pub async fn buffered(response: Response<Body>) -> (Parts, Bytes) {
    use http_body_util::BodyExt;
    let (parts, body) = response.into_parts();
    // Problem bodies are built in memory by the proxy, so collecting them cannot fail.
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    (parts, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{header, StatusCode};
    use http_body_util::BodyExt;

    fn record(body: StoredBody) -> CompletedRecord {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        CompletedRecord {
            fingerprint: Fingerprint::from_bytes([0; 32]),
            token: FencingToken::from_u64(1),
            created_at: SystemTime::now(),
            status: StatusCode::CREATED,
            headers,
            body,
        }
    }

    #[tokio::test]
    async fn replay_is_byte_for_byte_and_marked() {
        let response = replay(
            record(StoredBody::Kept(Bytes::from_static(b"\x00{\"id\":1}\xff"))),
            &ProblemBase::default(),
        );
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["idempotent-replayed"], "true");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"\x00{\"id\":1}\xff");
    }

    #[test]
    fn tombstone_replays_as_gone() {
        let response = replay(record(StoredBody::NotKept), &ProblemBase::default());
        assert_eq!(response.status(), StatusCode::GONE);
    }
}
