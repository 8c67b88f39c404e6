//! The idempotency service: admits a request (`admit.rs`), reserves its key and replays,
//! refuses, waits or runs it (`deduplicate.rs`, `execute.rs`), and reports the outcome.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::{Service, ServiceExt};

use super::admit::Admission;
use super::cache::ReplayCache;
use super::key::ScopedKey;
use super::policy::Policy;
use super::record::CompletedRecord;
use super::waiters::Waiters;
use crate::error::ProxyError;
use crate::store::Store;
use crate::telemetry::{RequestOutcome, RouteMetrics};
use crate::BoxError;

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

/// The service [`IdempotencyLayer`](super::IdempotencyLayer) wraps around an inner service.
#[derive(Debug, Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    handler: Handler,
}

impl<S> IdempotencyService<S> {
    pub(crate) fn new(inner: S, shared: Shared) -> Self {
        Self {
            inner,
            handler: Handler(shared),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

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
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The ready service handles this request; the clone waits for the next.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(self.handler.clone().handle(inner, request.map(Body::new)))
    }
}

/// What every request of one layer shares: the store, the policy, and the runtime state.
#[derive(Debug, Clone)]
pub struct Shared {
    pub store: Arc<dyn Store>,
    pub policy: Arc<Policy>,
    pub waiters: Arc<Waiters>,
    /// Every first request runs in a task tracked here, so a shutdown can wait for them.
    pub tasks: TaskTracker,
    pub cache: Option<Arc<ReplayCache>>,
    pub metrics: Arc<RouteMetrics>,
}

impl Shared {
    /// The local copy of a completed record, where the route keeps them.
    pub fn cached(&self, key: &ScopedKey) -> Option<CompletedRecord> {
        let cache = self
            .cache
            .as_ref()
            .filter(|_| !self.policy.replay_cache_ttl.is_zero())?;
        cache.get(&key.storage_key())
    }

    pub fn remember(&self, key: &ScopedKey, record: &CompletedRecord) {
        if let Some(cache) = &self.cache {
            let policy = &self.policy;
            cache.insert(
                key.storage_key(),
                record,
                policy.replay_cache_ttl,
                policy.ttl,
            );
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Handler(pub(super) Shared);

impl std::ops::Deref for Handler {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl Handler {
    async fn handle<S, B>(
        self,
        inner: S,
        request: Request<Body>,
    ) -> Result<Response<Body>, S::Error>
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let started = Instant::now();
        let (response, outcome, key_id) = match self.admit(request).await {
            Admission::PassThrough(request) => return self.forward(inner, request, started).await,
            Admission::Refused(error) => (self.problem(&error), RequestOutcome::Rejected, None),
            Admission::Keyed(request) => {
                let key_id = request.key.log_id();
                let (response, outcome) = self.deduplicate(inner, request).await?;
                (response, outcome, Some(key_id))
            }
        };
        let (status, elapsed) = (response.status(), started.elapsed());
        self.metrics
            .request_finished(outcome, status, key_id.as_deref(), elapsed);
        Ok(response)
    }

    /// Forwards a request that is not deduplicated, streaming both ways.
    async fn forward<S, B>(
        &self,
        inner: S,
        request: Request<Body>,
        started: Instant,
    ) -> Result<Response<Body>, S::Error>
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let result = inner.oneshot(request).await.map(|r| r.map(Body::new));
        let status = result
            .as_ref()
            .map_or(http::StatusCode::BAD_GATEWAY, |r| r.status());
        let elapsed = started.elapsed();
        self.metrics
            .request_finished(RequestOutcome::Bypassed, status, None, elapsed);
        result
    }

    pub(super) fn problem(&self, error: &ProxyError) -> Response<Body> {
        error.to_response(&self.policy.problem_base)
    }
}
