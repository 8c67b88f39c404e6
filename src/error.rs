//! The proxy's own answers: one error enum, and the one place that turns it into an RFC 9457
//! `application/problem+json` response (SPEC section 5).
//!
//! No internal detail (store addresses, upstream errors) is put into a problem: those go to the
//! log, and the client learns only what it can act on.

use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderValue, Response, StatusCode};
use serde::Serialize;

use crate::idempotency::key::KeyError;
use crate::units::ByteSize;

/// The `type` URI prefix of every problem, and whether to point clients at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemBase {
    uri: String,
    link: Option<HeaderValue>,
}

impl ProblemBase {
    pub const DEFAULT: &'static str = "urn:problem-type:idempotency-proxy:";

    /// A base the operator publishes (e.g. `https://api.example.com/docs/idempotency#`): each
    /// problem then also carries `Link: <base>; rel="describedby"`.
    pub fn published(uri: &str) -> Result<Self, String> {
        let link = HeaderValue::from_str(&format!("<{uri}>; rel=\"describedby\""))
            .map_err(|_| format!("problem_base {uri:?} is not a valid URI"))?;
        if uri == Self::DEFAULT {
            return Ok(Self::default());
        }
        Ok(Self {
            uri: uri.to_owned(),
            link: Some(link),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.uri
    }
}

impl Default for ProblemBase {
    fn default() -> Self {
        Self {
            uri: Self::DEFAULT.to_owned(),
            link: None,
        }
    }
}

/// Everything the proxy answers by itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("this route requires an idempotency key")]
    MissingKey,
    #[error("{0}")]
    InvalidKey(#[from] KeyError),
    #[error("the idempotency key was already used for a different request")]
    KeyReused,
    #[error("a request with this idempotency key is still being processed")]
    RequestInFlight { retry_after: Duration },
    #[error("the response to the original request was too large to keep; the operation ran and is not repeated")]
    ResponseNotKept,
    #[error("the request body is larger than {limit}")]
    BodyTooLarge { limit: ByteSize },
    #[error("the upstream service could not be reached")]
    UpstreamUnavailable,
    #[error("the upstream service did not answer in time")]
    UpstreamTimeout,
    #[error("idempotency records cannot be read or written right now; retry later")]
    StoreUnavailable,
    #[error("no route matches this request")]
    NoRoute,
    #[error("the request body could not be read")]
    UnreadableBody,
    /// Ambiguous message framing (RFC 9112 section 6): refused rather than guessed at, as a
    /// guess that differs from the upstream's is how requests are smuggled.
    #[error("{0}")]
    BadRequest(&'static str),
    #[error("the webhook signature was refused: {0}")]
    BadSignature(&'static str),
}

#[derive(Serialize)]
struct ProblemDocument<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: String,
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::MissingKey | ProxyError::InvalidKey(_) => StatusCode::BAD_REQUEST,
            ProxyError::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            ProxyError::RequestInFlight { .. } => StatusCode::CONFLICT,
            ProxyError::ResponseNotKept => StatusCode::GONE,
            ProxyError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::UpstreamUnavailable => StatusCode::BAD_GATEWAY,
            ProxyError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::UnreadableBody | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::BadSignature(_) => StatusCode::UNAUTHORIZED,
        }
    }

    /// The problem type, appended to the problem base.
    pub fn problem_type(&self) -> &'static str {
        match self {
            ProxyError::MissingKey => "missing-key",
            ProxyError::InvalidKey(_) => "invalid-key",
            ProxyError::KeyReused => "key-reused",
            ProxyError::RequestInFlight { .. } => "request-in-flight",
            ProxyError::ResponseNotKept => "response-not-kept",
            ProxyError::BodyTooLarge { .. } => "body-too-large",
            ProxyError::UpstreamUnavailable => "upstream-unavailable",
            ProxyError::UpstreamTimeout => "upstream-timeout",
            ProxyError::StoreUnavailable => "store-unavailable",
            ProxyError::NoRoute => "no-route",
            ProxyError::UnreadableBody => "unreadable-body",
            ProxyError::BadRequest(_) => "bad-request",
            ProxyError::BadSignature(_) => "bad-signature",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            ProxyError::MissingKey => "Idempotency key missing",
            ProxyError::InvalidKey(_) => "Idempotency key invalid",
            ProxyError::KeyReused => "Idempotency key reused",
            ProxyError::RequestInFlight { .. } => "Request in flight",
            ProxyError::ResponseNotKept => "Response not kept",
            ProxyError::BodyTooLarge { .. } => "Request body too large",
            ProxyError::UpstreamUnavailable => "Upstream unavailable",
            ProxyError::UpstreamTimeout => "Upstream timed out",
            ProxyError::StoreUnavailable => "Idempotency store unavailable",
            ProxyError::NoRoute => "Not found",
            ProxyError::UnreadableBody => "Request body unreadable",
            ProxyError::BadRequest(_) => "Bad request",
            ProxyError::BadSignature(_) => "Webhook signature invalid",
        }
    }

    /// The problem+json response for this error.
    pub fn to_response(&self, base: &ProblemBase) -> Response<Body> {
        let status = self.status();
        let document = ProblemDocument {
            kind: format!("{}{}", base.uri, self.problem_type()),
            title: self.title(),
            status: status.as_u16(),
            detail: self.to_string(),
        };
        let body = serde_json::to_vec(&document).expect("a problem document always serializes");
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(link) = &base.link {
            headers.insert(header::LINK, link.clone());
        }
        if let ProxyError::RequestInFlight { retry_after } = self {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn document(response: Response<Body>) -> serde_json::Value {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn problem_document_has_the_rfc_9457_members() {
        let response = ProxyError::KeyReused.to_response(&ProblemBase::default());
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert!(response.headers().get(header::LINK).is_none());
        let doc = document(response).await;
        assert_eq!(doc["type"], "urn:problem-type:idempotency-proxy:key-reused");
        assert_eq!(doc["status"], 422);
        assert!(doc["title"].is_string() && doc["detail"].is_string());
    }

    #[tokio::test]
    async fn published_base_adds_a_describedby_link() {
        let base = ProblemBase::published("https://api.example.com/docs/idempotency#").unwrap();
        let response = ProxyError::RequestInFlight {
            retry_after: Duration::from_millis(1500),
        }
        .to_response(&base);
        assert_eq!(
            response.headers()[header::LINK],
            "<https://api.example.com/docs/idempotency#>; rel=\"describedby\""
        );
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let doc = document(response).await;
        assert_eq!(
            doc["type"],
            "https://api.example.com/docs/idempotency#request-in-flight"
        );
    }
}
