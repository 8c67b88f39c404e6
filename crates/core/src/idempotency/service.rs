//! The `tower::Service` the layer wraps around an inner service: it hands each request to the
//! flow in `flow.rs` and returns its answer as a named future.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use axum_core::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use tower::Service;

use super::context::{AnswerBody, Context, Inner};
use super::flow;
use crate::error::BoxError;

/// The service [`IdempotencyLayer`](super::IdempotencyLayer) wraps around an inner service.
///
/// It never fails: whatever the inner service does, including failing, becomes an answer
/// (a failure reads as `502 upstream-unavailable`, see [`UpstreamFailure`](crate::error::UpstreamFailure)).
#[derive(Debug, Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    ctx: Arc<Context>,
}

impl<S> IdempotencyService<S> {
    pub(super) fn new(inner: S, ctx: Arc<Context>) -> Self {
        Self { inner, ctx }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for IdempotencyService<S>
where
    S: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
    ReqBody: HttpBody<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    /// Always ready: each request drives the inner service's readiness itself, and a failure
    /// there is an answer like any other upstream failure.
    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        self.serve(request)
    }
}

impl<S> IdempotencyService<S> {
    /// What `call` does, through a shared reference: a caller that holds the service in a
    /// shared list (the proxy's router) need not clone it first. A clone and its drop write
    /// each shared count the service holds, counts every worker thread writes, so each write
    /// moves a cache line between cores.
    pub(crate) fn serve<ReqBody, ResBody>(&self, request: Request<ReqBody>) -> ResponseFuture
    where
        S: Inner<ResBody> + Clone,
        ReqBody: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
        ResBody: AnswerBody,
    {
        let answer = flow::handle(self.ctx.clone(), self.inner.clone(), request.map(Body::new));
        ResponseFuture(Box::pin(answer))
    }
}

/// The answer of [`IdempotencyService`].
pub struct ResponseFuture(Pin<Box<dyn Future<Output = Response<Body>> + Send + 'static>>);

impl Future for ResponseFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
    }
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}
