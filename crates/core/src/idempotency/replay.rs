//! Step 6 of a request's life (docs/reference.md#the-life-of-a-request): a completed record back into the answer it
//! stores, byte for byte, marked as a replay.

use axum_core::body::Body;
use http::{HeaderName, HeaderValue, Response};

use super::buffer::with_trailers;
use crate::error::Problem;
use crate::grpc;
use crate::model::{CompletedRecord, StoredBody};

/// The header that marks an answer as coming from the store.
pub(crate) static IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The stored answer, marked as a replay; a record whose body was not kept gets `410`.
pub(super) fn replay(record: CompletedRecord) -> Response<Body> {
    let mut response = match record.body {
        StoredBody::Kept(body) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = record.status;
            *response.headers_mut() = record.headers;
            response
        }
        StoredBody::KeptWithTrailers { body, trailers } => {
            let code = grpc::status_of(&record.headers, Some(&trailers));
            let mut response = Response::new(with_trailers(body, *trailers));
            if let Some(code) = code {
                response.extensions_mut().insert(code);
            }
            *response.status_mut() = record.status;
            *response.headers_mut() = record.headers;
            response
        }
        StoredBody::NotKept => return Problem::ResponseNotKept.into_response(),
        StoredBody::Problem(kind) => {
            if let Some(problem) = Problem::stored(&kind) {
                problem.into_response()
            } else {
                tracing::error!(
                    kind,
                    "a stored record names a problem this proxy does not make"
                );
                return Problem::StoreUnavailable.into_response();
            }
        }
    };
    response.headers_mut().insert(
        IDEMPOTENT_REPLAYED.clone(),
        HeaderValue::from_static("true"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use bytes::Bytes;
    use http::{header, StatusCode};
    use http_body_util::BodyExt;

    use super::*;
    use crate::model::{FencingToken, Fingerprint};

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
        let stored = Bytes::from_static(b"\x00{\"id\":1}\xff");
        let response = replay(record(StoredBody::Kept(stored)));
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["idempotent-replayed"], "true");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"\x00{\"id\":1}\xff");
    }

    #[test]
    fn a_record_without_its_body_replays_as_gone() {
        let response = replay(record(StoredBody::NotKept));
        assert_eq!(response.status(), StatusCode::GONE);
        let problem = response.extensions().get::<Problem>();
        assert_eq!(problem, Some(&Problem::ResponseNotKept));
    }

    #[test]
    fn a_stored_problem_replays_as_that_problem() {
        let response = replay(record(StoredBody::Problem("upstream-timeout".into())));
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(response.headers()["idempotent-replayed"], "true");
        let problem = response.extensions().get::<Problem>();
        assert_eq!(problem, Some(&Problem::UpstreamTimeout));
        let unknown = replay(record(StoredBody::Problem("no-such-problem".into())));
        assert_eq!(unknown.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
