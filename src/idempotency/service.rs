//! The idempotency service: admits a request, reserves its key, and replays, refuses or runs it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{request::Parts, Request, Response};
use http_body::Body as HttpBody;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::{Service, ServiceExt};

use super::cache::ReplayCache;
use super::execute::Execution;
use super::extract::{key_from_body, key_from_headers, read_body};
use super::fingerprint::Fingerprint;
use super::key::{ClientScope, IdempotencyKey, ScopedKey};
use super::policy::{ConcurrentPolicy, KeySource, Policy, StoreErrorPolicy};
use super::record::{CompletedRecord, FencingToken};
use super::replay::replay;
use super::waiters::Waiters;
use crate::error::ProxyError;
use crate::store::{Reservation, Store, StoreError};
use crate::telemetry::{self, RequestOutcome};
use crate::BoxError;

/// How long a duplicate waits before asking the store again (`concurrent = "wait"`), doubling
/// up to the maximum: short enough to replay promptly, long enough not to hammer the store.
const WAIT_FIRST_PAUSE: Duration = Duration::from_millis(10);
const WAIT_MAX_PAUSE: Duration = Duration::from_millis(50);
/// What `Retry-After` tells a duplicate that was refused while the first is in flight.
const RETRY_AFTER: Duration = Duration::from_secs(1);

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

/// A request whose key, scope and fingerprint are known and whose body is read.
struct KeyedRequest {
    parts: Parts,
    body: Bytes,
    key: ScopedKey,
    fingerprint: Fingerprint,
}

enum Admission {
    /// Not ours to deduplicate: forwarded as it is, body streamed.
    PassThrough(Request<Body>),
    Refused(ProxyError),
    Keyed(KeyedRequest),
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
struct Handler(Shared);

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
        S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
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
        let route = &self.policy.route;
        telemetry::request_finished(
            route,
            outcome,
            response.status(),
            key_id.as_deref(),
            started.elapsed(),
        );
        Ok(response)
    }

    /// Steps 1 to 3 of the request's life: method, key, body limit; then scope and fingerprint.
    async fn admit(&self, request: Request<Body>) -> Admission {
        if !self.policy.covers(request.method()) {
            return Admission::PassThrough(request);
        }
        let (parts, body) = request.into_parts();
        let body = match self.verified(&parts, body).await {
            Ok(body) => body,
            Err(e) => return Admission::Refused(e),
        };
        let (key, body) = match &self.policy.key_source {
            KeySource::Header(name) => match key_from_headers(&parts.headers, name) {
                Err(e) => return Admission::Refused(e.into()),
                Ok(None) => return self.keyless(parts, body),
                Ok(Some(key)) => {
                    match read_body(&parts, body, self.policy.max_request_body).await {
                        Ok(bytes) => (key, bytes),
                        Err(e) => return Admission::Refused(e),
                    }
                }
            },
            KeySource::BodyPointer(pointer) => {
                match read_body(&parts, body, self.policy.max_request_body).await {
                    Err(e) => return Admission::Refused(e),
                    Ok(bytes) => match key_from_body(&bytes, pointer) {
                        Err(e) => return Admission::Refused(e.into()),
                        Ok(None) => return self.keyless(parts, Body::from(bytes)),
                        Ok(Some(key)) => (key, bytes),
                    },
                }
            }
        };
        Admission::Keyed(self.keyed(parts, body, key))
    }

    /// Checks the signature of a route that verifies one (signed webhooks); other routes' bodies
    /// pass untouched. The check lives here, rather than in a layer in front, because here the
    /// body is read once, within `max_request_body` and with its `413`, and the check falls
    /// exactly between reading (signatures cover the body) and reserving (a forged delivery must
    /// neither run nor take the key). Every covered request is checked, keyed or not, so an
    /// unsigned one cannot reach the upstream by leaving its key out.
    async fn verified(&self, parts: &Parts, body: Body) -> Result<Body, ProxyError> {
        let Some(verifier) = &self.policy.verify else {
            return Ok(body);
        };
        let bytes = read_body(parts, body, self.policy.max_request_body).await?;
        let now = std::time::SystemTime::now();
        verifier
            .verify(&parts.headers, &bytes, now)
            .map_err(ProxyError::BadSignature)?;
        // Reading it again below takes the one chunk back without copying.
        Ok(Body::from(bytes))
    }

    fn keyless(&self, parts: Parts, body: Body) -> Admission {
        if self.policy.require_key {
            Admission::Refused(ProxyError::MissingKey)
        } else {
            Admission::PassThrough(Request::from_parts(parts, body))
        }
    }

    fn keyed(&self, parts: Parts, body: Bytes, key: IdempotencyKey) -> KeyedRequest {
        let policy = &self.policy;
        let scope = policy
            .scope_header
            .as_ref()
            .and_then(|name| parts.headers.get(name));
        let scope = scope.map(|secret| ClientScope::from_secret(secret.as_bytes()));
        let key = ScopedKey::new(policy.route.clone(), scope, key);
        let fingerprint = Fingerprint::compute(
            &parts.method,
            &parts.uri,
            &parts.headers,
            &policy.fingerprint_headers,
            &body,
        );
        KeyedRequest {
            parts,
            body,
            key,
            fingerprint,
        }
    }

    /// Step 4: reserve, then run, replay, wait or refuse.
    async fn deduplicate<S, B>(
        &self,
        inner: S,
        request: KeyedRequest,
    ) -> Result<(Response<Body>, RequestOutcome), S::Error>
    where
        S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let same_request = |fingerprint: &Fingerprint| *fingerprint == request.fingerprint;
        let reservation = match self.cached(&request.key) {
            Some(record) => Ok(Reservation::Completed(record)),
            None => self.reserve(&request).await,
        };
        let reservation = match reservation {
            Ok(Reservation::InFlight(r)) if same_request(&r.fingerprint) && self.waits() => {
                self.wait_for_first(&request).await
            }
            other => other,
        };
        let reservation = match reservation {
            Ok(reservation) => reservation,
            Err(e) => return self.store_failed(inner, request, e).await,
        };
        let answer = match reservation {
            Reservation::Acquired(token) => self.execute(inner, request, token).await,
            Reservation::Completed(r) if same_request(&r.fingerprint) => {
                self.remember(&request.key, &r);
                (
                    replay(r, &self.policy.problem_base),
                    RequestOutcome::Replayed,
                )
            }
            Reservation::InFlight(r) if same_request(&r.fingerprint) => {
                let in_flight = ProxyError::RequestInFlight {
                    retry_after: RETRY_AFTER,
                };
                (self.problem(&in_flight), RequestOutcome::Conflict)
            }
            Reservation::InFlight(_) | Reservation::Completed(_) => (
                self.problem(&ProxyError::KeyReused),
                RequestOutcome::Mismatch,
            ),
        };
        Ok(answer)
    }

    fn waits(&self) -> bool {
        self.policy.concurrent == ConcurrentPolicy::Wait
    }

    /// Asks the store again until the first request with the key has finished or `wait_timeout`
    /// runs out. A finish in this process wakes the wait at once; one on another replica is
    /// seen at the next poll, the pause between polls doubling from 10ms up to 50ms.
    async fn wait_for_first(&self, request: &KeyedRequest) -> Result<Reservation, StoreError> {
        let storage_key = request.key.storage_key();
        let notify = self.waiters.subscribe(&storage_key);
        let deadline = Instant::now() + self.policy.wait_timeout;
        let mut pause = WAIT_FIRST_PAUSE;
        let result = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.reserve(request).await {
                Ok(Reservation::InFlight(r))
                    if r.fingerprint == request.fingerprint && Instant::now() < deadline => {}
                other => break other,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let _ = tokio::time::timeout(pause.min(left), notified).await;
            pause = (pause * 2).min(WAIT_MAX_PAUSE);
        };
        self.waiters.unsubscribe(&storage_key, notify);
        result
    }

    async fn reserve(&self, request: &KeyedRequest) -> Result<Reservation, StoreError> {
        let started = Instant::now();
        let reservation = self
            .store
            .reserve(&request.key, request.fingerprint, self.policy.lease)
            .await;
        telemetry::store_operation("reserve", started.elapsed());
        reservation
    }

    async fn execute<S, B>(
        &self,
        inner: S,
        request: KeyedRequest,
        token: FencingToken,
    ) -> (Response<Body>, RequestOutcome)
    where
        S: Service<Request<Body>, Response = Response<B>> + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let execution = Execution {
            shared: self.0.clone(),
            key: request.key,
            token,
            fingerprint: request.fingerprint,
        };
        execution
            .run(
                inner,
                Request::from_parts(request.parts, Body::from(request.body)),
            )
            .await
    }

    /// The store could not answer: refuse (`fail_closed`) or forward undeduplicated (`fail_open`).
    async fn store_failed<S, B>(
        &self,
        inner: S,
        request: KeyedRequest,
        error: StoreError,
    ) -> Result<(Response<Body>, RequestOutcome), S::Error>
    where
        S: Service<Request<Body>, Response = Response<B>>,
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        tracing::warn!(route = %self.policy.route, key = %request.key.log_id(), error = %error, "store unavailable");
        // A record that cannot be decoded is there: forwarding past it could run the operation
        // a second time, so it is refused even under fail_open.
        let corrupt = matches!(error, StoreError::Corrupt(_));
        if corrupt || self.policy.on_store_error == StoreErrorPolicy::FailClosed {
            return Ok((
                self.problem(&ProxyError::StoreUnavailable),
                RequestOutcome::Rejected,
            ));
        }
        metrics::counter!(telemetry::FAIL_OPEN_TOTAL, "route" => self.policy.route.as_str().to_owned()).increment(1);
        let request = Request::from_parts(request.parts, Body::from(request.body));
        let response = inner.oneshot(request).await?;
        Ok((response.map(Body::new), RequestOutcome::Bypassed))
    }

    /// Forwards a request that is not deduplicated, streaming both ways.
    async fn forward<S, B>(
        &self,
        inner: S,
        request: Request<Body>,
        started: Instant,
    ) -> Result<Response<Body>, S::Error>
    where
        S: Service<Request<Body>, Response = Response<B>>,
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let result = inner.oneshot(request).await.map(|r| r.map(Body::new));
        let status = result
            .as_ref()
            .map_or(http::StatusCode::BAD_GATEWAY, |r| r.status());
        telemetry::request_finished(
            &self.policy.route,
            RequestOutcome::Bypassed,
            status,
            None,
            started.elapsed(),
        );
        result
    }

    fn problem(&self, error: &ProxyError) -> Response<Body> {
        error.to_response(&self.policy.problem_base)
    }
}
