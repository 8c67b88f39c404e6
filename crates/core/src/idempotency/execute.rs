//! Step 5 of a request's life (docs/reference.md#the-life-of-a-request): the first request with a key goes upstream, its
//! lease is renewed while the upstream works, and its outcome is stored or its key freed.
//!
//! It runs in the request's own task, and moves to a task of its own if the client hangs up
//! (`detach.rs`), so a client that leaves does not cancel the operation halfway: the upstream
//! call runs to its end and its outcome is recorded, and the client's retry gets the replay
//! instead of a second execution.

use crate::error::ErrorChain;
use std::sync::Arc;

use axum_core::body::Body;
use http::{response::Parts, HeaderMap, Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;

use super::admit::KeyedRequest;
use super::buffer::{buffer, BufferedBody, Reading};
use super::complete::Held;
use super::context::{AnswerBody, Context, Inner};
use super::detach::Detachable;
use super::policy::{AmbiguousPolicy, ConcurrentPolicy, Effect};
use crate::error::{Cause, Problem, UpstreamFailure};
use crate::grpc::{self, GrpcCode, Protocol};
use crate::model::{CompletedRecord, FencingToken, StoredBody};
use crate::outcome::Outcome;
use crate::store::Fenced;

/// A reservation just acquired, and everything needed to see it through.
pub(super) struct Execution {
    ctx: Arc<Context>,
    held: Held,
}

/// What the upstream call came to, before the policy is applied.
enum Answer {
    /// The upstream answered (its body read whole, or found too large to keep).
    Upstream(Parts, BufferedBody),
    /// The proxy answers for it: the call failed or timed out.
    Problem {
        error: Problem,
        cause: Cause,
        outcome: Effect,
    },
}

impl Execution {
    /// Runs `request`, whose key `token` holds, to its end, even if the caller stops waiting.
    pub(super) async fn run<S, B>(
        ctx: Arc<Context>,
        inner: S,
        request: KeyedRequest,
        token: FencingToken,
    ) -> (Response<Body>, Outcome)
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let held = Held {
            key: request.key.clone(),
            fingerprint: request.fingerprint,
            token,
        };
        let execution = Self {
            held,
            ctx: ctx.clone(),
        };
        // The work goes straight into the detachable box: a local holding it, even moved out,
        // would keep its 1.9 KiB in this future too.
        let detachable =
            Detachable::new(execution.execute(inner, request.into_request()), &ctx.tasks);
        detachable.await
    }

    async fn execute<S, B>(self, inner: S, request: Request<Body>) -> (Response<Body>, Outcome)
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let in_flight = self.ctx.metrics.in_flight();
        let started = Instant::now();
        let deadline = started + self.ctx.policy.upstream_deadline(request.headers());
        // The renewal runs beside the call in this same task, and its timer is also the call's
        // deadline: one timer per call, where a timeout beside the renewal's sleep took two.
        // Biased, so an answer ready at the deadline is taken.
        let answer = tokio::select! {
            biased;
            answer = self.call_upstream(inner, request) => answer,
            () = self.renew_lease_until(deadline) => timed_out(),
        };
        self.ctx.metrics.upstream_call(started.elapsed());
        let settled = self.settle(answer).await;
        drop(in_flight);
        if self.ctx.policy.concurrent == ConcurrentPolicy::Wait {
            self.ctx.waiters.finished(self.held.key.storage_key());
        }
        settled
    }

    /// Keeps the lease alive while the upstream works, so a slow upstream never lets a
    /// duplicate in, and returns at `deadline`. A lost lease stops the renewing, not the call.
    async fn renew_lease_until(&self, deadline: Instant) {
        let every = self.ctx.policy.renew_every();
        let mut renewing = true;
        loop {
            let next = Instant::now() + every;
            if next >= deadline {
                return tokio::time::sleep_until(deadline).await;
            }
            tokio::time::sleep_until(next).await;
            if renewing {
                // A store slow to answer must not hold the call past its deadline.
                renewing = tokio::time::timeout_at(deadline, self.renew_lease())
                    .await
                    .unwrap_or(true);
            }
        }
    }

    /// Renews the lease once; false when it was lost and renewing should stop.
    async fn renew_lease(&self) -> bool {
        let (held, lease) = (&self.held, self.ctx.policy.lease);
        match self.ctx.store.renew(&held.key, held.token, lease).await {
            Ok(Fenced::Applied) => true,
            Ok(Fenced::LeaseLost) => {
                tracing::warn!(key = %held.key.log_id(), "lease lost while the upstream was working");
                false
            }
            Err(e) => {
                tracing::warn!(key = %held.key.log_id(), error = %ErrorChain(&e), "renewing the lease failed");
                true
            }
        }
    }

    async fn call_upstream<S, B>(&self, inner: S, request: Request<Body>) -> Answer
    where
        S: Inner<B>,
        B: AnswerBody,
    {
        let response = match inner.oneshot(request).await {
            Ok(response) => response,
            Err(e) => return failed(&*e.into()),
        };
        let (parts, body) = response.into_parts();
        let policy = &self.ctx.policy;
        let reading = match policy.protocol {
            Protocol::Http => Reading::Http,
            Protocol::Grpc => Reading::Grpc {
                single_message: !policy.grpc_keyed_streams,
            },
        };
        match buffer(body, policy.max_cached_body.as_usize(), reading).await {
            Ok(body) => Answer::Upstream(parts, body),
            Err(e) => failed(&*e),
        }
    }

    /// Applies the policy to the answer: store it, or free the key; then answer the client.
    async fn settle(&self, answer: Answer) -> (Response<Body>, Outcome) {
        let (outcome, grpc_status) = match &answer {
            Answer::Upstream(_, BufferedBody::Stream(_)) => return self.pass_stream(answer).await,
            Answer::Upstream(parts, body) => self.classify(parts, body),
            Answer::Problem { outcome, .. } => (*outcome, None),
        };
        let keep = match outcome {
            Effect::Definite => true,
            Effect::NotExecuted => false,
            Effect::Ambiguous => self.ctx.policy.on_ambiguous == AmbiguousPolicy::Keep,
        };
        let request_outcome = if keep {
            self.held.complete(&self.ctx, self.record(&answer)).await;
            Outcome::Forwarded
        } else {
            self.held.release(&self.ctx).await;
            Outcome::Released
        };
        let mut response = respond(answer);
        if let Some(code) = grpc_status {
            response.extensions_mut().insert(code);
        }
        (response, request_outcome)
    }

    /// An upstream answer's outcome: by its HTTP status, or on a gRPC route by its
    /// `grpc-status` where it has one.
    fn classify(&self, parts: &Parts, body: &BufferedBody) -> (Effect, Option<GrpcCode>) {
        let policy = &self.ctx.policy;
        if policy.protocol == Protocol::Grpc {
            if let Some(code) = grpc::status_of(&parts.headers, body.trailers()) {
                return (policy.classify_grpc(code), Some(code));
            }
        }
        (policy.classify(parts.status), None)
    }

    /// A server stream on a gRPC route that does not deduplicate streams: the key is freed and
    /// the stream passed on as it comes.
    async fn pass_stream(&self, answer: Answer) -> (Response<Body>, Outcome) {
        self.held.release(&self.ctx).await;
        (respond(answer), Outcome::Bypassed)
    }

    /// What the store keeps of the answer.
    fn record(&self, answer: &Answer) -> CompletedRecord {
        let ctx = &self.ctx;
        match answer {
            Answer::Upstream(parts, body) => {
                self.held
                    .record(ctx, parts.status, &parts.headers, body.stored())
            }
            Answer::Problem { error, .. } => {
                let kind = StoredBody::Problem(error.problem_type().to_owned());
                self.held
                    .record(ctx, error.status(), &HeaderMap::new(), kind)
            }
        }
    }
}

/// The answer for a call still running at `upstream_timeout`.
fn timed_out() -> Answer {
    Answer::Problem {
        error: Problem::UpstreamTimeout,
        cause: Cause("no answer within upstream_timeout".into()),
        outcome: Effect::Ambiguous,
    }
}

/// The answer for a call that failed: not sent, or broken after it was sent.
fn failed(error: &(dyn std::error::Error + 'static)) -> Answer {
    let outcome = match UpstreamFailure::of(error) {
        UpstreamFailure::NotSent => Effect::NotExecuted,
        // The body was read whole before the call, so a body failure is not the client's: it is
        // as ambiguous as any other failure after sending began.
        UpstreamFailure::ClientBody | UpstreamFailure::AfterSend => Effect::Ambiguous,
    };
    Answer::Problem {
        error: Problem::UpstreamUnavailable,
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
