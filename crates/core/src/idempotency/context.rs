//! What every request of one layer shares, and what the layer needs of the service it wraps.

use std::sync::Arc;

use axum_core::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use tokio_util::task::TaskTracker;
use tower::Service;

use super::inbox_hook::InboxHook;
use super::metrics::RouteMetrics;
use super::policy::Policy;
use super::waiters::Waiters;
use crate::error::BoxError;
use crate::problem::ProblemBase;
use crate::store::Store;

/// The route's store, policy and runtime state, shared by its requests through one `Arc`.
#[derive(Debug)]
pub(super) struct Context {
    pub(super) store: Arc<dyn Store>,
    pub(super) policy: Policy,
    /// Duplicates waiting for a first request of this process (`concurrent = "wait"`).
    pub(super) waiters: Waiters,
    /// Every first request runs in a task tracked here, so a shutdown can wait for them.
    pub(super) tasks: TaskTracker,
    pub(super) metrics: RouteMetrics,
    /// What the layer's own answers are rendered with.
    pub(super) problems: Arc<ProblemBase>,
    /// On an inbox route: what accepting a request tells the delivery worker.
    pub(super) inbox: Option<InboxHook>,
}

/// A response body the layer can buffer, or stream when it is too large to keep.
pub trait AnswerBody: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send + 'static {}

impl<B> AnswerBody for B where B: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send + 'static {}

/// What the layer needs of the service it wraps: it is called from a task of its own, so a
/// client that hangs up does not cancel the operation.
pub trait Inner<B>:
    Service<Request<Body>, Response = Response<B>, Error: Into<BoxError>, Future: Send> + Send + 'static
{
}

impl<S, B> Inner<B> for S where
    S: Service<Request<Body>, Response = Response<B>, Error: Into<BoxError>, Future: Send>
        + Send
        + 'static
{
}
