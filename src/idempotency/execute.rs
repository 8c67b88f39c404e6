//! Step 5 of a request's life (SPEC section 3): the first request with a key goes upstream, its
//! lease is renewed while the upstream works, and its outcome is stored or its key freed.
//!
//! All of it runs in a task of its own, so a client that hangs up does not cancel the
//! operation halfway: the upstream call runs to its end and its outcome is recorded, and the
//! client's retry gets the replay instead of a second execution.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use http::{response::Parts, HeaderMap, Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;

use super::admit::KeyedRequest;
use super::buffer::{buffer, BufferedBody};
use super::context::{AnswerBody, Context, Inner};
use super::policy::{AmbiguousPolicy, ConcurrentPolicy, Outcome};
use crate::error::{Cause, ProxyError, UpstreamFailure};
use crate::headers::storable_response_headers;
use crate::model::{CompletedRecord, FencingToken, Fingerprint, Record, ScopedKey, StoredBody};
use crate::outcome::RequestOutcome;
use crate::store::Fenced;

/// How many times storing an outcome is tried before the key is left to its lease.
const COMPLETE_ATTEMPTS: u32 = 3;

/// A reservation just acquired, and everything needed to see it through.
pub(super) struct Execution {
    ctx: Arc<Context>,
    key: ScopedKey,
    token: FencingToken,
    fingerprint: Fingerprint,
}

/// What the upstream call came to, before the policy is applied.
enum Answer {
    /// The upstream answered (its body read whole, or found too large to keep).
    Upstream(Parts, BufferedBody),
    /// The proxy answers for it: the call failed or timed out.
    Problem {
        error: ProxyError,
        cause: Cause,
        outcome: Outcome,
    },
}

impl Execution {
    /// Runs `request`, whose key `token` holds, in its own task, and waits for the answer to
    /// give the client.
    pub(super) async fn run<S, B>(
        ctx: Arc<Context>,
        inner: S,
        request: KeyedRequest,
        token: FencingToken,
    ) -> (Response<Body>, RequestOutcome)
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let execution = Self {
            key: request.key.clone(),
            fingerprint: request.fingerprint,
            token,
            ctx: ctx.clone(),
        };
        let task = execution.execute(inner, request.into_request());
        match ctx.tasks.spawn(task).await {
            Ok(answer) => answer,
            Err(panic) => {
                // The record stays in flight and frees when its lease runs out.
                tracing::error!(error = %panic, "the upstream task failed");
                let answer = ProxyError::UpstreamUnavailable.into_response();
                (answer, RequestOutcome::Rejected)
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
        let in_flight = self.ctx.metrics.in_flight();
        let started = Instant::now();
        // The renewal runs beside the call in this same task, and stops when the call ends.
        let answer = tokio::select! {
            answer = self.call_upstream(inner, request) => answer,
            never = self.renew_lease() => match never {},
        };
        self.ctx.metrics.upstream_call(started.elapsed());
        let settled = self.settle(answer).await;
        drop(in_flight);
        if self.ctx.policy.concurrent == ConcurrentPolicy::Wait {
            self.ctx.waiters.finished(&self.key.storage_key());
        }
        settled
    }

    /// Keeps the lease alive while the upstream works, so a slow upstream never lets a
    /// duplicate in. Runs until dropped; a lost lease stops the renewing, not the call.
    async fn renew_lease(&self) -> std::convert::Infallible {
        let policy = &self.ctx.policy;
        loop {
            tokio::time::sleep(policy.renew_every()).await;
            let renewed = self.ctx.store.renew(&self.key, self.token, policy.lease);
            match renewed.await {
                Ok(Fenced::Applied) => {}
                Ok(Fenced::LeaseLost) => {
                    tracing::warn!(key = %self.key.log_id(), "lease lost while the upstream was working");
                    return std::future::pending().await;
                }
                Err(e) => {
                    tracing::warn!(key = %self.key.log_id(), error = %e, "renewing the lease failed");
                }
            }
        }
    }

    async fn call_upstream<S, B>(&self, inner: S, request: Request<Body>) -> Answer
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let policy = &self.ctx.policy;
        let work = async {
            let response = match inner.oneshot(request).await {
                Ok(response) => response,
                Err(e) => return failed(&*e.into()),
            };
            let (parts, body) = response.into_parts();
            match buffer(body, policy.max_cached_body.as_usize()).await {
                Ok(body) => Answer::Upstream(parts, body),
                Err(e) => failed(&*e),
            }
        };
        match tokio::time::timeout(policy.upstream_timeout, work).await {
            Ok(answer) => answer,
            Err(_) => Answer::Problem {
                error: ProxyError::UpstreamTimeout,
                cause: Cause("no answer within upstream_timeout".into()),
                outcome: Outcome::Ambiguous,
            },
        }
    }

    /// Applies the policy to the answer: store it, or free the key; then answer the client.
    async fn settle(&self, answer: Answer) -> (Response<Body>, RequestOutcome) {
        let outcome = match &answer {
            Answer::Upstream(parts, _) => self.ctx.policy.classify(parts.status),
            Answer::Problem { outcome, .. } => *outcome,
        };
        let keep = match outcome {
            Outcome::Definite => true,
            Outcome::NotExecuted => false,
            Outcome::Ambiguous => self.ctx.policy.on_ambiguous == AmbiguousPolicy::Keep,
        };
        let request_outcome = if keep {
            self.complete(self.record(&answer)).await;
            RequestOutcome::Forwarded
        } else {
            self.release().await;
            RequestOutcome::Released
        };
        (respond(answer), request_outcome)
    }

    /// What the store keeps of the answer: status, storable headers, and the body if kept.
    fn record(&self, answer: &Answer) -> CompletedRecord {
        let (status, headers, body) = match answer {
            Answer::Upstream(parts, body) => {
                let exclude = &self.ctx.policy.replay_exclude_headers;
                let headers = storable_response_headers(&parts.headers, exclude);
                (parts.status, headers, body.stored())
            }
            Answer::Problem { error, .. } => {
                let kind = StoredBody::Problem(error.problem_type().to_owned());
                (error.status(), HeaderMap::new(), kind)
            }
        };
        let record = CompletedRecord {
            fingerprint: self.fingerprint,
            token: self.token,
            created_at: SystemTime::now(),
            status,
            headers,
            body,
        };
        // Kept in memory for a while (memory store, replay cache): it must not pin the read buffer.
        record.detached()
    }

    /// Stores the outcome. A store error is retried a few times: while the outcome is not
    /// stored, the key would free when its lease runs out and a retry could run it again.
    async fn complete(&self, record: CompletedRecord) {
        let (store, ttl, log_id) = (&self.ctx.store, self.ctx.policy.ttl, self.key.log_id());
        for attempt in 0..COMPLETE_ATTEMPTS {
            let started = Instant::now();
            let stored = store.complete(&self.key, &record, ttl).await;
            self.ctx.metrics.completed(started.elapsed());
            match stored {
                Ok(Fenced::Applied) => return,
                // A try that timed out may still have been applied: then the record is ours.
                Ok(Fenced::LeaseLost) if attempt > 0 && self.stored_by_us().await => return,
                Ok(Fenced::LeaseLost) => {
                    tracing::warn!(key = %log_id, "outcome not stored: the lease ran out and the key was taken over");
                    return;
                }
                Err(e) => {
                    tracing::warn!(key = %log_id, attempt, error = %e, "storing the outcome failed");
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                }
            }
        }
        tracing::error!(key = %log_id, "outcome not stored; the key frees when its lease runs out");
    }

    async fn stored_by_us(&self) -> bool {
        let current = self.ctx.store.get(&self.key).await;
        matches!(current, Ok(Some((Record::Completed(r), _))) if r.token == self.token)
    }

    async fn release(&self) {
        if let Err(e) = self.ctx.store.release(&self.key, self.token).await {
            tracing::warn!(key = %self.key.log_id(), error = %e, "releasing the key failed; it frees when its lease runs out");
        }
    }
}

/// The answer for a call that failed: not sent, or broken after it was sent.
fn failed(error: &(dyn std::error::Error + 'static)) -> Answer {
    let outcome = match UpstreamFailure::of(error) {
        UpstreamFailure::NotSent => Outcome::NotExecuted,
        // The body was read whole before the call, so a body failure is not the client's: it is
        // as ambiguous as any other failure after sending began.
        UpstreamFailure::ClientBody | UpstreamFailure::AfterSend => Outcome::Ambiguous,
    };
    Answer::Problem {
        error: ProxyError::UpstreamUnavailable,
        cause: Cause::of(error),
        outcome,
    }
}

/// What the client gets: the upstream's answer, or the proxy's problem with its cause.
fn respond(answer: Answer) -> Response<Body> {
    match answer {
        Answer::Upstream(parts, body) => Response::from_parts(parts, body.into_body()),
        Answer::Problem { error, cause, .. } => {
            let mut response = error.into_response();
            response.extensions_mut().insert(cause);
            response
        }
    }
}
