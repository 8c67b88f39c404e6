//! Rendering the proxy's own answers as RFC 9457 `application/problem+json` (docs/reference.md#problems):
//! the problem base, and the outermost layer that renders every response carrying a
//! [`Problem`], or a problem of a layer above the core ([`ProblemType`]).
//!
//! It is the outermost layer so that everything below it, the router, the idempotency layer
//! and replays of stored problems alike, answers an error the same way
//! ([`Problem::into_response`]) without knowing the problem base.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_core::body::Body;
use http::{header, HeaderValue, Response};
use serde::Serialize;
use tower::{Layer, Service};

use crate::error::{Problem, ProblemMeta};
use crate::grpc::{percent_encode, GrpcCall, GRPC_MESSAGE, GRPC_STATUS};

/// A problem of a layer above the core, such as the proxy's admin listener: what its document
/// says. [`ProblemBase`] renders it with the same members, base and `Link` as a [`Problem`].
///
/// ```
/// use http::StatusCode;
/// use idempotency_core::{ProblemBase, ProblemMeta, ProblemType};
///
/// #[derive(Debug)]
/// struct NoSuchOrder;
///
/// impl std::fmt::Display for NoSuchOrder {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("no order of this id")
///     }
/// }
///
/// impl ProblemType for NoSuchOrder {
///     fn meta(&self) -> ProblemMeta {
///         ProblemMeta::new(StatusCode::NOT_FOUND, "no-order", "No such order")
///     }
/// }
///
/// let mut response = NoSuchOrder.into_problem_response();
/// ProblemBase::default().render(&mut response);
/// assert_eq!(response.status(), StatusCode::NOT_FOUND);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
pub trait ProblemType: fmt::Display {
    /// Its status, type and title.
    fn meta(&self) -> ProblemMeta;

    /// A response with this problem's status and the problem as an extension, for
    /// [`ProblemLayer`] (or [`ProblemBase::render`]) to render on the way out.
    fn into_problem_response(self) -> Response<Body>
    where
        Self: Sized,
    {
        let meta = self.meta();
        let mut response = Response::new(Body::empty());
        *response.status_mut() = meta.status;
        response.extensions_mut().insert(Pending {
            meta,
            detail: self.to_string(),
        });
        response
    }
}

impl ProblemType for Problem {
    fn meta(&self) -> ProblemMeta {
        Problem::meta(self)
    }

    fn into_problem_response(self) -> Response<Body> {
        self.into_response()
    }
}

/// A [`ProblemType`] on its way out: what its document will say.
#[derive(Clone)]
struct Pending {
    meta: ProblemMeta,
    detail: String,
}

/// A problem base that cannot be sent in a `Link` header.
#[derive(Debug, thiserror::Error)]
#[error("problem_base {uri:?} is not a valid URI")]
pub struct ProblemBaseError {
    uri: String,
    #[source]
    source: http::header::InvalidHeaderValue,
}

/// The `type` URI prefix of every problem, and whether to point clients at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProblemBase {
    uri: String,
    link: Option<HeaderValue>,
}

impl ProblemBase {
    /// The base when none is configured.
    pub const DEFAULT: &'static str = "urn:problem-type:idempotency-proxy:";

    /// A base the operator publishes (e.g. `https://api.example.com/docs/idempotency#`): each
    /// problem then also carries `Link: <base>; rel="describedby"`.
    pub fn published(uri: &str) -> Result<Self, ProblemBaseError> {
        let link =
            HeaderValue::from_str(&format!("<{uri}>; rel=\"describedby\"")).map_err(|source| {
                ProblemBaseError {
                    uri: uri.to_owned(),
                    source,
                }
            })?;
        if uri == Self::DEFAULT {
            return Ok(Self::default());
        }
        Ok(Self {
            uri: uri.to_owned(),
            link: Some(link),
        })
    }

    /// The base as configured.
    pub fn as_str(&self) -> &str {
        &self.uri
    }

    /// Gives a response that carries a [`Problem`] its problem document; any other response
    /// is left as it is.
    pub fn render(&self, response: &mut Response<Body>) {
        if let Some(other) = response.extensions_mut().remove::<Pending>() {
            return self.write(response, other.meta, other.detail, None);
        }
        let Some(error) = response.extensions_mut().remove::<Problem>() else {
            return;
        };
        if response.extensions().get::<GrpcCall>().is_some() {
            return render_grpc(&error, response);
        }
        let differs = match &error {
            Problem::KeyReused { differs } => Some(differs.iter().map(|p| p.as_str()).collect()),
            _ => None,
        };
        self.write(response, error.meta(), error.to_string(), differs);
        if let Problem::RequestInFlight { retry_after } = error {
            let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
    }
}

/// The problem as a gRPC client reads it (docs/grpc.md#statuses): a trailers-only answer,
/// `200` with `grpc-status` and `grpc-message` (the title and the detail) in its headers.
fn render_grpc(error: &Problem, response: &mut Response<Body>) {
    let meta = error.meta();
    let mut message = format!("{}: {}", meta.title, error);
    if let Problem::KeyReused { differs } = error {
        let parts: Vec<_> = differs.iter().map(|p| p.as_str()).collect();
        message.push_str(&format!(" (differs: {})", parts.join(", ")));
    }
    *response.status_mut() = http::StatusCode::OK;
    *response.body_mut() = Body::empty();
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(&GRPC_STATUS, HeaderValue::from(error.grpc_code().as_u32()));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(&message)) {
        headers.insert(&GRPC_MESSAGE, value);
    }
    if let Problem::RequestInFlight { retry_after } = error {
        let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
}

impl ProblemBase {
    /// Writes the problem document into `response`: the one renderer of every problem type.
    fn write(
        &self,
        response: &mut Response<Body>,
        meta: ProblemMeta,
        detail: String,
        differs: Option<Vec<&'static str>>,
    ) {
        let document = ProblemDocument {
            kind: format!("{}{}", self.uri, meta.kind),
            title: meta.title,
            status: meta.status.as_u16(),
            detail,
            differs,
        };
        let body = serde_json::to_vec(&document).expect("a problem document always serializes");
        *response.body_mut() = Body::from(body);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(link) = &self.link {
            headers.insert(header::LINK, link.clone());
        }
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

#[derive(Serialize)]
struct ProblemDocument<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: String,
    /// `key-reused` only: the parts of the request that differed (an RFC 9457 extension
    /// member).
    #[serde(skip_serializing_if = "Option::is_none")]
    differs: Option<Vec<&'static str>>,
}

/// Renders the problems of the service it wraps: put it outermost.
#[derive(Debug, Clone, Default)]
pub struct ProblemLayer {
    base: Arc<ProblemBase>,
}

impl ProblemLayer {
    /// Problems rendered with `base`.
    pub fn new(base: Arc<ProblemBase>) -> Self {
        Self { base }
    }
}

impl ProblemLayer {
    /// `answer`, its problem rendered when it is ready: what a [`ProblemService`] does to its
    /// inner service's answers, for a caller that has the answer's future in hand.
    pub fn render<F>(&self, answer: F) -> Rendered<F> {
        Rendered {
            inner: answer,
            base: self.base.clone(),
        }
    }
}

impl<S> Layer<S> for ProblemLayer {
    type Service = ProblemService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ProblemService {
            inner,
            base: self.base.clone(),
        }
    }
}

/// The service [`ProblemLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct ProblemService<S> {
    inner: S,
    base: Arc<ProblemBase>,
}

impl<S> ProblemService<S> {
    /// The service whose problems are rendered.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, R> Service<R> for ProblemService<S>
where
    S: Service<R, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Rendered<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        Rendered {
            inner: self.inner.call(request),
            base: self.base.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`ProblemService`].
    pub struct Rendered<F> {
        #[pin]
        inner: F,
        base: Arc<ProblemBase>,
    }
}

impl<F, E> Future for Rendered<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = std::task::ready!(this.inner.poll(cx))?;
        this.base.render(&mut response);
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;
    use http_body_util::BodyExt;

    use super::*;
    use crate::model::Part;

    async fn rendered(base: &ProblemBase, error: Problem) -> (Response<()>, serde_json::Value) {
        let mut response = error.into_response();
        base.render(&mut response);
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        let document = serde_json::from_slice(&bytes).unwrap();
        (Response::from_parts(parts, ()), document)
    }

    #[tokio::test]
    async fn on_a_grpc_call_every_problem_is_a_trailers_only_status_from_the_table() {
        let want = [
            (Problem::MissingKey, 3),
            (Problem::BadSignature("x"), 16),
            (
                Problem::RequestInFlight {
                    retry_after: Duration::from_secs(2),
                },
                10,
            ),
            (Problem::ResponseNotKept, 9),
            (
                Problem::KeyReused {
                    differs: vec![Part::Body],
                },
                9,
            ),
            (
                Problem::BodyTooLarge {
                    limit: crate::units::ByteSize::kib(1),
                },
                8,
            ),
            (Problem::NoRoute, 12),
            (Problem::UpstreamUnavailable, 14),
            (Problem::StoreUnavailable, 14),
            (Problem::UpstreamTimeout, 14),
        ];
        for (error, code) in want {
            let mut response = error.clone().into_response();
            response.extensions_mut().insert(GrpcCall);
            ProblemBase::default().render(&mut response);
            let headers = response.headers();
            assert_eq!(response.status(), StatusCode::OK, "{error:?}");
            assert_eq!(headers[header::CONTENT_TYPE], "application/grpc");
            assert_eq!(
                headers["grpc-status"],
                code.to_string().as_str(),
                "{error:?}"
            );
            let message = headers["grpc-message"].to_str().unwrap();
            assert!(message.starts_with(error.meta().title), "{message}");
            let body = response.into_body().collect().await.unwrap();
            assert!(body.trailers().is_none() && body.to_bytes().is_empty());
        }
        let mut reused = Problem::KeyReused {
            differs: vec![Part::Body],
        }
        .into_response();
        reused.extensions_mut().insert(GrpcCall);
        ProblemBase::default().render(&mut reused);
        let message = reused.headers()["grpc-message"].to_str().unwrap();
        assert!(message.ends_with("(differs: body)"), "{message}");
        let mut in_flight = Problem::RequestInFlight {
            retry_after: Duration::from_secs(2),
        }
        .into_response();
        in_flight.extensions_mut().insert(GrpcCall);
        ProblemBase::default().render(&mut in_flight);
        assert_eq!(in_flight.headers()[header::RETRY_AFTER], "2");
    }

    #[tokio::test]
    async fn problem_document_has_the_rfc_9457_members() {
        let reused = Problem::KeyReused {
            differs: vec![Part::Target, Part::Body],
        };
        let (response, doc) = rendered(&ProblemBase::default(), reused).await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert!(response.headers().get(header::LINK).is_none());
        assert!(response.extensions().get::<Problem>().is_none());
        assert_eq!(doc["type"], "urn:problem-type:idempotency-proxy:key-reused");
        assert_eq!(doc["status"], 422);
        assert!(doc["title"].is_string() && doc["detail"].is_string());
        assert_eq!(doc["differs"], serde_json::json!(["target", "body"]));
    }

    #[tokio::test]
    async fn only_key_reused_says_what_differs() {
        let unknown = Problem::KeyReused { differs: vec![] };
        let (_, doc) = rendered(&ProblemBase::default(), unknown).await;
        assert_eq!(doc["differs"], serde_json::json!([]));
        let (_, doc) = rendered(&ProblemBase::default(), Problem::StoreUnavailable).await;
        assert!(doc.get("differs").is_none(), "{doc}");
    }

    #[tokio::test]
    async fn published_base_adds_a_describedby_link() {
        let base = ProblemBase::published("https://api.example.com/docs/idempotency#").unwrap();
        let in_flight = Problem::RequestInFlight {
            retry_after: Duration::from_millis(1500),
        };
        let (response, doc) = rendered(&base, in_flight).await;
        assert_eq!(
            response.headers()[header::LINK],
            "<https://api.example.com/docs/idempotency#>; rel=\"describedby\""
        );
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        assert_eq!(
            doc["type"],
            "https://api.example.com/docs/idempotency#request-in-flight"
        );
    }

    #[tokio::test]
    async fn a_problem_of_another_type_gets_the_same_document() {
        struct Closed;
        impl fmt::Display for Closed {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the shop is closed")
            }
        }
        impl ProblemType for Closed {
            fn meta(&self) -> ProblemMeta {
                ProblemMeta::new(StatusCode::CONFLICT, "closed", "Closed")
            }
        }
        let base = ProblemBase::published("https://api.example.com/problems#").unwrap();
        let mut response = Closed.into_problem_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        base.render(&mut response);
        assert_eq!(
            response.headers()[header::LINK],
            "<https://api.example.com/problems#>; rel=\"describedby\""
        );
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let want = serde_json::json!({
            "type": "https://api.example.com/problems#closed",
            "title": "Closed",
            "status": 409,
            "detail": "the shop is closed",
        });
        assert_eq!(doc, want);
    }

    #[tokio::test]
    async fn other_responses_pass_untouched() {
        let mut response = Response::new(Body::from("upstream's own 404"));
        *response.status_mut() = StatusCode::NOT_FOUND;
        ProblemBase::default().render(&mut response);
        assert!(response.headers().get(header::CONTENT_TYPE).is_none());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "upstream's own 404");
    }
}
