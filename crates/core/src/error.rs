//! Everything the proxy answers by itself (docs/reference.md#problems), as one error enum with one table of
//! what each is called, and the one place that reads an upstream failure into one of them.
//!
//! An error becomes a response in two steps. Where it happens, [`Problem::into_response`]
//! makes a response that carries the error as an extension and has no body yet; the outermost
//! layer, [`ProblemLayer`](crate::ProblemLayer), renders every such response as
//! `application/problem+json` with the configured problem base. So no code on the request path
//! needs to know the problem base, and a stored problem (an ambiguous upstream failure kept as
//! the outcome) is rendered by the same code when it is replayed.
//!
//! No internal detail (store addresses, upstream errors) is put into a problem: the cause of a
//! failure travels beside the response as a [`Cause`], which the request's log line reports.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum_core::body::Body;
use http::{Response, StatusCode};

use crate::grpc::GrpcCode;
use crate::model::{KeyError, Part};
use crate::units::ByteSize;

/// The boxed error inner services and bodies may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Everything the layer, and the proxy's request path, answers by itself. A layer above it
/// answers its own kinds with its own type (the proxy's admin listener does), rendered the same
/// way through [`ProblemType`](crate::ProblemType).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// The route requires a key and the request has none.
    #[error("this route requires an idempotency key")]
    MissingKey,
    /// The key is not valid (docs/reference.md#keys).
    #[error("{0}")]
    InvalidKey(#[from] KeyError),
    /// The key was used before for a different request.
    #[error("the idempotency key was already used for a different request")]
    KeyReused {
        /// The parts of the request that differ from the first one's, never their values; none
        /// are known when the first request's record was stored before part digests existed.
        differs: Vec<Part>,
    },
    /// The first request with the key is still running.
    #[error("a request with this idempotency key is still being processed")]
    RequestInFlight {
        /// When the client should try again.
        retry_after: Duration,
    },
    /// The first request's answer was too large to keep.
    #[error("the response to the original request was too large to keep; the operation ran and is not repeated")]
    ResponseNotKept,
    /// The request body is over `max_request_body`.
    #[error("the request body is larger than {limit}")]
    BodyTooLarge {
        /// The route's `max_request_body`.
        limit: ByteSize,
    },
    /// The upstream could not be reached, or broke off.
    #[error("the upstream service could not be reached")]
    UpstreamUnavailable,
    /// The upstream did not answer within `upstream_timeout`.
    #[error("the upstream service did not answer in time")]
    UpstreamTimeout,
    /// The store could not be read or written.
    #[error("idempotency records cannot be read or written right now; retry later")]
    StoreUnavailable,
    /// No route matches and there is no default upstream.
    #[error("no route matches this request")]
    NoRoute,
    /// The client's body broke off or was malformed.
    #[error("the request body could not be read")]
    UnreadableBody,
    /// Ambiguous message framing (RFC 9112 section 6): refused rather than guessed at, as a
    /// guess that differs from the upstream's is how requests are smuggled.
    #[error("{0}")]
    BadRequest(&'static str),
    /// A signed-webhook route got a delivery without a valid signature.
    #[error("the webhook signature was refused: {0}")]
    BadSignature(&'static str),
}

/// What a problem is called: its status, its type (appended to the problem base) and title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemMeta {
    /// The response status.
    pub status: StatusCode,
    /// The problem type, e.g. `key-reused`.
    pub kind: &'static str,
    /// A short, fixed summary.
    pub title: &'static str,
}

impl ProblemMeta {
    /// A problem type: its status, its type and its title.
    pub const fn new(status: StatusCode, kind: &'static str, title: &'static str) -> Self {
        Self {
            status,
            kind,
            title,
        }
    }
}

/// The one table of what each of the layer's problems is called.
mod types {
    use super::ProblemMeta;
    use http::StatusCode as S;

    const fn meta(status: S, kind: &'static str, title: &'static str) -> ProblemMeta {
        ProblemMeta::new(status, kind, title)
    }

    pub(super) const MISSING_KEY: ProblemMeta =
        meta(S::BAD_REQUEST, "missing-key", "Idempotency key missing");
    pub(super) const INVALID_KEY: ProblemMeta =
        meta(S::BAD_REQUEST, "invalid-key", "Idempotency key invalid");
    pub(super) const KEY_REUSED: ProblemMeta = meta(
        S::UNPROCESSABLE_ENTITY,
        "key-reused",
        "Idempotency key reused",
    );
    pub(super) const REQUEST_IN_FLIGHT: ProblemMeta =
        meta(S::CONFLICT, "request-in-flight", "Request in flight");
    pub(super) const RESPONSE_NOT_KEPT: ProblemMeta =
        meta(S::GONE, "response-not-kept", "Response not kept");
    pub(super) const BODY_TOO_LARGE: ProblemMeta = meta(
        S::PAYLOAD_TOO_LARGE,
        "body-too-large",
        "Request body too large",
    );
    pub(super) const UPSTREAM_UNAVAILABLE: ProblemMeta = meta(
        S::BAD_GATEWAY,
        "upstream-unavailable",
        "Upstream unavailable",
    );
    pub(super) const UPSTREAM_TIMEOUT: ProblemMeta =
        meta(S::GATEWAY_TIMEOUT, "upstream-timeout", "Upstream timed out");
    pub(super) const STORE_UNAVAILABLE: ProblemMeta = meta(
        S::SERVICE_UNAVAILABLE,
        "store-unavailable",
        "Idempotency store unavailable",
    );
    pub(super) const NO_ROUTE: ProblemMeta = meta(S::NOT_FOUND, "no-route", "Not found");
    pub(super) const UNREADABLE_BODY: ProblemMeta =
        meta(S::BAD_REQUEST, "unreadable-body", "Request body unreadable");
    pub(super) const BAD_REQUEST: ProblemMeta = meta(S::BAD_REQUEST, "bad-request", "Bad request");
    pub(super) const BAD_SIGNATURE: ProblemMeta = meta(
        S::UNAUTHORIZED,
        "bad-signature",
        "Webhook signature invalid",
    );
}

impl Problem {
    /// Every problem type of the layer, once each: what a reference of its answers lists.
    pub const TYPES: &'static [ProblemMeta] = &[
        types::MISSING_KEY,
        types::INVALID_KEY,
        types::KEY_REUSED,
        types::REQUEST_IN_FLIGHT,
        types::RESPONSE_NOT_KEPT,
        types::BODY_TOO_LARGE,
        types::UPSTREAM_UNAVAILABLE,
        types::UPSTREAM_TIMEOUT,
        types::STORE_UNAVAILABLE,
        types::NO_ROUTE,
        types::UNREADABLE_BODY,
        types::BAD_REQUEST,
        types::BAD_SIGNATURE,
    ];

    /// What this problem is called.
    pub fn meta(&self) -> ProblemMeta {
        match self {
            Self::MissingKey => types::MISSING_KEY,
            Self::InvalidKey(_) => types::INVALID_KEY,
            Self::KeyReused { .. } => types::KEY_REUSED,
            Self::RequestInFlight { .. } => types::REQUEST_IN_FLIGHT,
            Self::ResponseNotKept => types::RESPONSE_NOT_KEPT,
            Self::BodyTooLarge { .. } => types::BODY_TOO_LARGE,
            Self::UpstreamUnavailable => types::UPSTREAM_UNAVAILABLE,
            Self::UpstreamTimeout => types::UPSTREAM_TIMEOUT,
            Self::StoreUnavailable => types::STORE_UNAVAILABLE,
            Self::NoRoute => types::NO_ROUTE,
            Self::UnreadableBody => types::UNREADABLE_BODY,
            Self::BadRequest(_) => types::BAD_REQUEST,
            Self::BadSignature(_) => types::BAD_SIGNATURE,
        }
    }

    /// One problem of each kind, for the checks of the table.
    #[cfg(test)]
    pub(crate) fn one_of_each() -> Vec<Problem> {
        let all = vec![
            Self::MissingKey,
            Self::InvalidKey(KeyError::Empty),
            Self::KeyReused { differs: vec![] },
            Self::RequestInFlight {
                retry_after: Duration::from_secs(1),
            },
            Self::ResponseNotKept,
            Self::BodyTooLarge {
                limit: ByteSize::kib(1),
            },
            Self::UpstreamUnavailable,
            Self::UpstreamTimeout,
            Self::StoreUnavailable,
            Self::NoRoute,
            Self::UnreadableBody,
            Self::BadRequest("x"),
            Self::BadSignature("x"),
        ];
        // No wildcard: a kind added to the enum stops this compiling until it is listed above.
        for error in &all {
            match error {
                Self::MissingKey
                | Self::InvalidKey(_)
                | Self::KeyReused { .. }
                | Self::RequestInFlight { .. }
                | Self::ResponseNotKept
                | Self::BodyTooLarge { .. }
                | Self::UpstreamUnavailable
                | Self::UpstreamTimeout
                | Self::StoreUnavailable
                | Self::NoRoute
                | Self::UnreadableBody
                | Self::BadRequest(_)
                | Self::BadSignature(_) => {}
            }
        }
        all
    }

    /// The gRPC status a gRPC route answers this error with (docs/grpc.md#statuses): the
    /// same table, read for gRPC clients.
    pub fn grpc_code(&self) -> GrpcCode {
        match self.status().as_u16() {
            400 | 422 if !matches!(self, Self::KeyReused { .. }) => GrpcCode::INVALID_ARGUMENT,
            401 => GrpcCode::UNAUTHENTICATED,
            // A call no route takes: a gRPC server answers a method it lacks this way.
            404 if matches!(self, Self::NoRoute) => GrpcCode::UNIMPLEMENTED,
            404 => GrpcCode::NOT_FOUND,
            409 => GrpcCode::ABORTED,
            410 | 422 => GrpcCode::FAILED_PRECONDITION,
            413 => GrpcCode::RESOURCE_EXHAUSTED,
            502..=504 => GrpcCode::UNAVAILABLE,
            // No error has another status today. One added without its line here must not
            // read as UNAVAILABLE, which tells a gRPC client that a retry is safe.
            _ => GrpcCode::INTERNAL,
        }
    }

    /// The response status.
    pub fn status(&self) -> StatusCode {
        self.meta().status
    }

    /// The problem type, appended to the problem base.
    pub fn problem_type(&self) -> &'static str {
        self.meta().kind
    }

    /// The errors that may be stored as a request's outcome, by their problem type: the proxy's
    /// own answers to an ambiguous upstream failure (docs/reference.md#the-life-of-a-request, step 5).
    pub fn stored(kind: &str) -> Option<Self> {
        [Self::UpstreamUnavailable, Self::UpstreamTimeout]
            .into_iter()
            .find(|e| e.problem_type() == kind)
    }

    /// A response with this error's status and the error as an extension, for
    /// [`ProblemLayer`](crate::ProblemLayer) to render on the way out.
    pub fn into_response(self) -> Response<Body> {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = self.status();
        response.extensions_mut().insert(self);
        response
    }
}

impl axum_core::response::IntoResponse for Problem {
    fn into_response(self) -> Response<Body> {
        Problem::into_response(self)
    }
}

/// An error and its sources, written one after the other (`a: b: c`): how a log line or a
/// refusal names an error whose cause is its [`source`](StdError::source).
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a request failed, for its log line; never shown to the client.
#[derive(Debug, Clone)]
pub struct Cause(pub Arc<str>);

impl Cause {
    /// The cause an error describes, with its sources.
    pub fn of(error: &(dyn StdError + 'static)) -> Self {
        Self(ErrorChain(error).to_string().into())
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An inner-service error meaning "the request never reached the upstream" (connection
/// refused, DNS failure). The layer then frees the key, so a retry runs the operation. Any
/// other error is treated as ambiguous: the operation may have run.
#[derive(Debug)]
pub struct RequestNotSent(pub BoxError);

impl fmt::Display for RequestNotSent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request not sent: {}", self.0)
    }
}

impl StdError for RequestNotSent {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}

/// What an error of the service behind the layer (the upstream) says about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    /// It never left (connection refused, DNS): running it again is safe.
    NotSent,
    /// The client's own streamed body broke off or was malformed, so the upstream never got a
    /// whole request; the client is to blame, not the upstream.
    ClientBody,
    /// It broke after the request was sent: it may have run.
    AfterSend,
}

impl UpstreamFailure {
    /// Reads an inner error: the rescue every upstream failure goes through.
    pub fn of(error: &(dyn StdError + 'static)) -> Self {
        let chain = || std::iter::successors(Some(error), |e| (*e).source());
        if chain().any(<dyn std::error::Error + 'static>::is::<RequestNotSent>) {
            return Self::NotSent;
        }
        // hyper reports the body it was given failing as a user error.
        let user = |e: &hyper::Error| e.is_user();
        if chain()
            .filter_map(|e| e.downcast_ref::<hyper::Error>())
            .any(user)
        {
            return Self::ClientBody;
        }
        Self::AfterSend
    }

    /// What the client is answered.
    pub fn problem(self) -> Problem {
        match self {
            Self::NotSent | Self::AfterSend => Problem::UpstreamUnavailable,
            Self::ClientBody => Problem::UnreadableBody,
        }
    }
}

/// The answer to a request whose upstream call failed, carrying the error as its cause.
pub(crate) fn rescue(error: &BoxError) -> Response<Body> {
    let mut response = UpstreamFailure::of(error.as_ref())
        .problem()
        .into_response();
    response.extensions_mut().insert(Cause::of(error.as_ref()));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_problem_type_has_one_status_and_title_and_stored_ones_read_back() {
        let mut named = std::collections::HashMap::new();
        for error in Problem::one_of_each() {
            let meta = error.meta();
            assert!(meta.status.is_client_error() || meta.status.is_server_error());
            // Two kinds of error may share a type (a running request's record, refused on the
            // proxy and on the admin listener), but then they are one problem to a client.
            let first = named.insert(meta.kind, (meta.status, meta.title));
            assert!(
                first.is_none_or(|first| first == (meta.status, meta.title)),
                "{error:?}"
            );
            let stored = Problem::stored(error.problem_type());
            let storable = matches!(
                error,
                Problem::UpstreamUnavailable | Problem::UpstreamTimeout
            );
            assert_eq!(stored.is_some(), storable, "{error:?}");
        }
    }

    #[test]
    fn the_catalogue_lists_each_kind_once() {
        let mut listed: Vec<ProblemMeta> =
            Problem::one_of_each().iter().map(Problem::meta).collect();
        listed.dedup();
        assert_eq!(listed, Problem::TYPES);
    }

    #[test]
    fn every_error_has_its_line_in_the_grpc_table() {
        for error in Problem::one_of_each() {
            assert_ne!(error.grpc_code(), GrpcCode::INTERNAL, "{error:?}");
        }
    }

    #[test]
    fn an_error_travels_on_its_response_until_rendered() {
        let reused = Problem::KeyReused {
            differs: vec![Part::Body],
        };
        let response = reused.clone().into_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(response.extensions().get::<Problem>(), Some(&reused));
    }

    #[test]
    fn upstream_failures_are_read_from_the_error_chain() {
        let refused: BoxError = Box::new(RequestNotSent("connection refused".into()));
        assert_eq!(
            UpstreamFailure::of(refused.as_ref()),
            UpstreamFailure::NotSent
        );
        let rescued = rescue(&refused);
        assert_eq!(rescued.status(), StatusCode::BAD_GATEWAY);
        let cause = rescued.extensions().get::<Cause>().unwrap();
        assert!(cause.0.contains("connection refused"), "{cause}");
        let broken: BoxError = "connection reset".into();
        assert_eq!(
            UpstreamFailure::of(broken.as_ref()),
            UpstreamFailure::AfterSend
        );
    }
}
