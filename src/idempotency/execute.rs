//! Running the first request with a key: upstream call, lease renewal, and recording the outcome.
//!
//! All of it runs in a task of its own, so a client that hangs up does not cancel the
//! operation halfway: the upstream call runs to its end and its outcome is recorded, and the
//! client's retry gets the replay instead of a second execution.

use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;

use super::buffer::{buffer, BufferedBody};
use super::fingerprint::Fingerprint;
use super::key::ScopedKey;
use super::policy::{AmbiguousPolicy, ConcurrentPolicy, Outcome};
use super::record::{CompletedRecord, FencingToken, Record, StoredBody};
use super::replay::{buffered, completed_record};
use super::service::{AnswerBody, Inner, Shared};
use super::RequestNotSent;
use crate::error::ProxyError;
use crate::store::{Fenced, Reservation};
use crate::telemetry::RequestOutcome;

/// A reservation just acquired, and everything needed to see it through.
pub struct Execution {
    pub shared: Shared,
    pub key: ScopedKey,
    pub token: FencingToken,
    pub fingerprint: Fingerprint,
}

/// How the upstream call ended, before the policy is applied.
enum UpstreamResult {
    Answered(http::response::Parts, BufferedBody),
    /// Refused before the request was sent (connection refused, DNS): it did not run.
    NotSent,
    /// Broke after the request was sent: it may have run.
    Failed,
    TimedOut,
}

impl std::ops::Deref for Execution {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Execution {
    /// Runs the request in its own task and waits for the answer to give the client.
    pub async fn run<S, B>(
        self,
        inner: S,
        request: Request<Body>,
    ) -> (Response<Body>, RequestOutcome)
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let base = self.policy.problem_base.clone();
        let tasks = self.shared.tasks.clone();
        match tasks.spawn(self.execute(inner, request)).await {
            Ok(answer) => answer,
            Err(panic) => {
                // The record stays in flight and frees when its lease runs out.
                tracing::error!(error = %panic, "the upstream task failed");
                (
                    ProxyError::UpstreamUnavailable.to_response(&base),
                    RequestOutcome::Rejected,
                )
            }
        }
    }

    async fn execute<S, B>(
        self,
        inner: S,
        request: Request<Body>,
    ) -> (Response<Body>, RequestOutcome)
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let in_flight = self.metrics.in_flight();
        let started = Instant::now();
        // The renewal runs beside the call in this same task, and stops when the call ends.
        let result = tokio::select! {
            result = self.call_upstream(inner, request) => result,
            never = self.renew_lease() => match never {},
        };
        self.metrics.upstream_call(started.elapsed());
        let answer = self.settle(result).await;
        drop(in_flight);
        if self.policy.concurrent == ConcurrentPolicy::Wait {
            self.waiters.finished(&self.key.storage_key());
        }
        answer
    }

    /// Keeps the lease alive while the upstream works, so a slow upstream never lets a
    /// duplicate in. Runs until dropped; a lost lease stops the renewing, not the call.
    async fn renew_lease(&self) -> std::convert::Infallible {
        loop {
            tokio::time::sleep(self.policy.renew_every()).await;
            match self
                .store
                .renew(&self.key, self.token, self.policy.lease)
                .await
            {
                Ok(Fenced::Applied) => {}
                Ok(Fenced::LeaseLost) => {
                    tracing::warn!(key = %self.key.log_id(), "lease lost while the upstream was working");
                    return std::future::pending().await;
                }
                Err(e) => {
                    tracing::warn!(key = %self.key.log_id(), error = %e, "renewing the lease failed")
                }
            }
        }
    }

    async fn call_upstream<S, B>(&self, inner: S, request: Request<Body>) -> UpstreamResult
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let limit = self.policy.max_cached_body.as_usize();
        let work = async {
            let response = match inner.oneshot(request).await.map_err(Into::into) {
                Ok(response) => response,
                Err(e) if is_not_sent(&*e) => return UpstreamResult::NotSent,
                Err(e) => {
                    tracing::warn!(route = %self.policy.route, error = %e, "upstream call failed after the request was sent");
                    return UpstreamResult::Failed;
                }
            };
            let (parts, body) = response.into_parts();
            match buffer(body, limit).await {
                Ok(body) => UpstreamResult::Answered(parts, body),
                Err(_) => UpstreamResult::Failed,
            }
        };
        tokio::time::timeout(self.policy.upstream_timeout, work)
            .await
            .unwrap_or(UpstreamResult::TimedOut)
    }

    /// Applies the policy to the result: store it, or free the key, and answer the client.
    async fn settle(&self, result: UpstreamResult) -> (Response<Body>, RequestOutcome) {
        let (parts, body, outcome) = match result {
            UpstreamResult::Answered(parts, body) => {
                let outcome = self.policy.classify(parts.status);
                (parts, body, outcome)
            }
            UpstreamResult::NotSent => {
                self.problem(ProxyError::UpstreamUnavailable, Outcome::NotExecuted)
                    .await
            }
            UpstreamResult::Failed => {
                self.problem(ProxyError::UpstreamUnavailable, Outcome::Ambiguous)
                    .await
            }
            UpstreamResult::TimedOut => {
                self.problem(ProxyError::UpstreamTimeout, Outcome::Ambiguous)
                    .await
            }
        };
        let keep = match outcome {
            Outcome::Definite => true,
            Outcome::NotExecuted => false,
            Outcome::Ambiguous => self.policy.on_ambiguous == AmbiguousPolicy::Keep,
        };
        let request_outcome = if keep {
            self.complete(&parts, body.stored()).await;
            RequestOutcome::Forwarded
        } else {
            self.release().await;
            RequestOutcome::Released
        };
        (
            Response::from_parts(parts, body.into_body()),
            request_outcome,
        )
    }

    async fn problem(
        &self,
        error: ProxyError,
        outcome: Outcome,
    ) -> (http::response::Parts, BufferedBody, Outcome) {
        let (parts, bytes) = buffered(error.to_response(&self.policy.problem_base)).await;
        (parts, BufferedBody::Whole(bytes), outcome)
    }

    /// Stores the outcome. A store error is retried for up to `COMPLETE_PATIENCE`: while the
    /// outcome is not stored, the key would free when its lease runs out and a retry could run
    /// it again.
    async fn complete(&self, parts: &http::response::Parts, stored_body: StoredBody) {
        let exclude = &self.policy.replay_exclude_headers;
        let record = completed_record(parts, stored_body, self.fingerprint, self.token, exclude);
        let deadline = Instant::now() + COMPLETE_PATIENCE;
        let mut pause = COMPLETE_FIRST_PAUSE;
        for attempt in 0u32.. {
            let started = Instant::now();
            let stored = self
                .store
                .complete(&self.key, &record, self.policy.ttl)
                .await;
            self.metrics.completed(started.elapsed());
            match stored {
                Ok(Fenced::Applied) => return self.remember(&self.key, &record),
                // A try that timed out may still have been applied: then the record is ours.
                Ok(Fenced::LeaseLost) if attempt > 0 && self.stored_by_us().await => return,
                Ok(Fenced::LeaseLost) => return self.complete_after_the_lease(record).await,
                Err(e) => {
                    tracing::warn!(key = %self.key.log_id(), attempt, error = %e, "storing the outcome failed");
                    if Instant::now() + pause >= deadline {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(COMPLETE_MAX_PAUSE);
                }
            }
        }
        tracing::error!(key = %self.key.log_id(), "outcome not stored; the key frees when its lease runs out");
    }

    /// The lease ran out before the outcome reached the store: the store stalled or restarted,
    /// or this process was paused. The operation has run all the same, and the client is about
    /// to get its answer; so if nobody has taken the key since, the outcome is kept under a
    /// fresh reservation, and a retry replays it instead of running the operation again. A
    /// record another request made stands.
    async fn complete_after_the_lease(&self, mut record: CompletedRecord) {
        let log_id = self.key.log_id();
        let reserved = self
            .store
            .reserve(&self.key, self.fingerprint, self.policy.lease)
            .await;
        let token = match reserved {
            Ok(Reservation::Acquired(token)) => token,
            Ok(Reservation::Completed(r)) if r.token == self.token => return,
            Ok(_) => {
                tracing::warn!(key = %log_id, "outcome not stored: the lease ran out and the key was taken over");
                return;
            }
            Err(e) => {
                tracing::error!(key = %log_id, error = %e, "outcome not stored: the lease ran out and the store cannot be reached");
                return;
            }
        };
        record.token = token;
        match self
            .store
            .complete(&self.key, &record, self.policy.ttl)
            .await
        {
            Ok(Fenced::Applied) => {
                tracing::warn!(key = %log_id, "the lease ran out before the outcome was stored; stored under a fresh reservation");
                self.remember(&self.key, &record);
            }
            Ok(Fenced::LeaseLost) => {
                tracing::warn!(key = %log_id, "outcome not stored: the fresh reservation ran out too")
            }
            Err(e) => {
                tracing::error!(key = %log_id, error = %e, "outcome not stored; the key frees when its lease runs out")
            }
        }
    }

    async fn stored_by_us(&self) -> bool {
        let current = self.store.get(&self.key).await;
        matches!(current, Ok(Some((Record::Completed(r), _))) if r.token == self.token)
    }

    async fn release(&self) {
        match self.store.release(&self.key, self.token).await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(key = %self.key.log_id(), error = %e, "releasing the key failed; it frees when its lease runs out")
            }
        }
    }
}

/// How long storing an outcome is retried while the store cannot be reached. The operation has
/// run, and until its outcome is stored a retry could run it again once the store is back; a
/// late completion never overwrites another request's record, so trying longer costs only the
/// client's wait for its answer during an outage.
const COMPLETE_PATIENCE: Duration = Duration::from_secs(10);
/// The pause between two tries, doubling up to the maximum.
const COMPLETE_FIRST_PAUSE: Duration = Duration::from_millis(50);
const COMPLETE_MAX_PAUSE: Duration = Duration::from_secs(1);

/// Whether an inner-service error says the request never reached the upstream.
fn is_not_sent(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<RequestNotSent>() {
            return true;
        }
        current = e.source();
    }
    false
}
