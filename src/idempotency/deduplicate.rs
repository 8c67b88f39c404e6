//! Step 4 of a request's life: reserve the scoped key in one store operation, then run the
//! request, replay the stored answer, wait for the first request, or refuse.

use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;

use super::admit::KeyedRequest;
use super::execute::Execution;
use super::fingerprint::Fingerprint;
use super::policy::{ConcurrentPolicy, StoreErrorPolicy};
use super::record::FencingToken;
use super::replay::replay;
use super::service::{AnswerBody, Handler, Inner};
use crate::error::ProxyError;
use crate::store::{Reservation, StoreError};
use crate::telemetry::RequestOutcome;

/// How long a duplicate waits before asking the store again (`concurrent = "wait"`), doubling
/// up to the maximum: short enough to replay promptly, long enough not to hammer the store.
const WAIT_FIRST_PAUSE: Duration = Duration::from_millis(10);
const WAIT_MAX_PAUSE: Duration = Duration::from_millis(50);
/// What `Retry-After` tells a duplicate that was refused while the first is in flight.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Handler {
    /// Step 4: reserve, then run, replay, wait or refuse.
    pub(super) async fn deduplicate<S, B>(
        &self,
        inner: S,
        request: KeyedRequest,
    ) -> Result<(Response<Body>, RequestOutcome), S::Error>
    where
        S: Inner<B>,
        B: AnswerBody,
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
        self.metrics.reserved(started.elapsed());
        reservation
    }

    async fn execute<S, B>(
        &self,
        inner: S,
        request: KeyedRequest,
        token: FencingToken,
    ) -> (Response<Body>, RequestOutcome)
    where
        S: Inner<B>,
        B: AnswerBody,
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
        S: Inner<B>,
        B: AnswerBody,
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
        self.metrics.failed_open();
        let request = Request::from_parts(request.parts, Body::from(request.body));
        let response = inner.oneshot(request).await?;
        Ok((response.map(Body::new), RequestOutcome::Bypassed))
    }
}
