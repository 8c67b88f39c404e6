//! The life of one request (docs/reference.md#the-life-of-a-request), top to bottom: admit it (steps 1 to 3, `admit.rs`),
//! reserve its scoped key in one store operation (step 4), then run it (step 5, `execute.rs`),
//! replay the stored answer (step 6, `replay.rs`), wait for the first request, or refuse. Every
//! request ends in one count and one call of the route's observer (`metrics.rs`): in the proxy,
//! its log line.

use crate::error::ErrorChain;
use std::sync::Arc;
use std::time::Duration;

use axum_core::body::Body;
use http::{Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;

use super::accept::{accept, Accepted, QUEUED};
use super::admit::{admit, Admission, KeyedRequest};
use super::context::{AnswerBody, Context, Inner};
use super::execute::Execution;
use super::policy::{ConcurrentPolicy, RouteMode, StoreErrorPolicy};
use super::replay::replay;
use crate::error::{rescue, Problem};
use crate::grpc::{self, GrpcCall, GrpcCode, Protocol};
use crate::model::{Fingerprint, InFlightRecord, LogId};
use crate::outcome::Outcome;
use crate::store::{Reservation, StoreError};

/// How long a duplicate waits before asking the store again (`concurrent = "wait"`), doubling
/// up to the maximum: short enough to replay promptly, long enough not to hammer the store.
const WAIT_FIRST_PAUSE: Duration = Duration::from_millis(10);
const WAIT_MAX_PAUSE: Duration = Duration::from_millis(50);
/// What `Retry-After` tells a duplicate that was refused while the first is in flight.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Answers one request, from admission to the log line.
pub(super) async fn handle<S, B>(
    ctx: Arc<Context>,
    inner: S,
    request: Request<Body>,
) -> Response<Body>
where
    S: Inner<B>,
    B: AnswerBody,
{
    let started = Instant::now();
    let (mut response, outcome, key) = match admit(&ctx.policy, request).await {
        Admission::PassThrough(request) => {
            let response = pass_through(inner, request).await;
            (response, Outcome::Bypassed, None)
        }
        Admission::Refused(error) => (error.into_response(), Outcome::Rejected, None),
        Admission::Keyed(request) if ctx.policy.is_unkeyed_stream(&request.body) => {
            let response = pass_through(inner, request.into_request()).await;
            (response, Outcome::Bypassed, None)
        }
        Admission::Keyed(request) => {
            let key = request.key.log_id();
            // Boxed: the keyed path's states are most of this future's size, which a request
            // that is only forwarded would otherwise carry and copy too. Built in a statement
            // of its own: a temporary in the statement that awaits keeps its place in this
            // future across the await, even once moved into the box (5 KiB against 2.2).
            let deduplicated = Box::pin(deduplicate(&ctx, inner, request));
            let (response, outcome) = deduplicated.await;
            (response, outcome, Some(key))
        }
    };
    if ctx.policy.protocol == Protocol::Grpc {
        mark_grpc(&mut response);
    }
    let key = key.as_ref().map(LogId::as_str);
    ctx.metrics
        .request_finished(outcome, &response, key, started.elapsed());
    // Rendered here, not left to a `ProblemLayer` outside: a service that stacks none still
    // answers its clients a problem document they can read.
    ctx.problems.render(&mut response);
    response
}

/// An answer to a gRPC call: the proxy's own is to be rendered as a gRPC error, and the call's
/// status, where it is known by now, is what its log line and the status page show.
fn mark_grpc(response: &mut Response<Body>) {
    let extensions = response.extensions();
    let code = extensions.get::<GrpcCode>().copied().or_else(|| {
        let problem = extensions.get::<Problem>().map(Problem::grpc_code);
        problem.or_else(|| grpc::status_of(response.headers(), None))
    });
    let extensions = response.extensions_mut();
    extensions.insert(GrpcCall);
    if let Some(code) = code {
        extensions.insert(code);
    }
}

/// Forwards a request that is not deduplicated, streaming both ways.
async fn pass_through<S, B>(inner: S, request: Request<Body>) -> Response<Body>
where
    S: Inner<B>,
    B: AnswerBody,
{
    match inner.oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(e) => rescue(&e.into()),
    }
}

/// Step 4: reserve, then run, replay, wait or refuse (on an inbox route: acknowledge).
async fn deduplicate<S, B>(
    ctx: &Arc<Context>,
    inner: S,
    request: KeyedRequest,
) -> (Response<Body>, Outcome)
where
    S: Inner<B>,
    B: AnswerBody,
{
    // The inbox's acknowledgement, the wait for a first request and the store's failure are
    // boxed: held inline, their states (the acknowledgement's about 1.2 KiB) would be copied
    // with every keyed request of every route, whichever path it takes.
    if ctx.policy.mode == RouteMode::Inbox {
        let acknowledging = Box::pin(acknowledge(ctx, inner, request));
        return acknowledging.await;
    }
    let same_request = |stored: &Fingerprint| request.is_same_as(stored, &ctx.policy);
    let reservation = match reserve(ctx, &request).await {
        Ok(Reservation::InFlight(r)) if same_request(&r.fingerprint) && waits(ctx) => {
            let waiting = Box::pin(wait_for_first(ctx, &request));
            waiting.await
        }
        other => other,
    };
    let reservation = match reservation {
        Ok(reservation) => reservation,
        Err(e) => {
            let failing = Box::pin(store_failed(ctx, inner, request, e));
            return failing.await;
        }
    };
    match reservation {
        Reservation::Acquired(token) => Execution::run(ctx.clone(), inner, request, token).await,
        other => existing(&request, ctx, other),
    }
}

/// The answer when the key already has a record: replay, conflict or mismatch.
fn existing(
    request: &KeyedRequest,
    ctx: &Context,
    reservation: Reservation,
) -> (Response<Body>, Outcome) {
    let same_request = |stored: &Fingerprint| request.is_same_as(stored, &ctx.policy);
    match reservation {
        Reservation::Completed(r) if same_request(&r.fingerprint) => (replay(r), Outcome::Replayed),
        Reservation::InFlight(r) if same_request(&r.fingerprint) => {
            let in_flight = Problem::RequestInFlight {
                retry_after: RETRY_AFTER,
            };
            (in_flight.into_response(), Outcome::Conflict)
        }
        Reservation::InFlight(r) => key_reused(request, &r.fingerprint),
        Reservation::Completed(r) => key_reused(request, &r.fingerprint),
        // Only `reserve` acquires, and its caller runs the request instead.
        Reservation::Acquired(_) => (Problem::StoreUnavailable.into_response(), Outcome::Rejected),
    }
}

/// Step 4 on an inbox route: acknowledge and queue, or answer from the key's record.
async fn acknowledge<S, B>(
    ctx: &Arc<Context>,
    inner: S,
    request: KeyedRequest,
) -> (Response<Body>, Outcome)
where
    S: Inner<B>,
    B: AnswerBody,
{
    match accept(ctx, &request).await {
        Ok(Accepted::Queued(response)) => (response, QUEUED),
        Ok(Accepted::Existing(record)) => existing(&request, ctx, record.into()),
        Err(e) => store_failed(ctx, inner, request, e).await,
    }
}

/// `422 key-reused`, naming the parts in which the request differs from the one stored.
fn key_reused(request: &KeyedRequest, stored: &Fingerprint) -> (Response<Body>, Outcome) {
    let differs = request.fingerprint.differing_parts(stored);
    let reused = Problem::KeyReused { differs }.into_response();
    (reused, Outcome::Mismatch)
}

fn waits(ctx: &Context) -> bool {
    ctx.policy.concurrent == ConcurrentPolicy::Wait
}

/// The one atomic store operation: the key is ours now, or what is already there.
async fn reserve(ctx: &Context, request: &KeyedRequest) -> Result<Reservation, StoreError> {
    let started = Instant::now();
    let lease = ctx.policy.lease;
    let reservation = ctx.store.reserve(&request.key, request.fingerprint, lease);
    let reservation = reservation.await;
    ctx.metrics.reserved(started.elapsed());
    reservation
}

/// Asks the store again until the first request with the key has finished or `wait_timeout`
/// runs out. A finish in this process wakes the wait at once; one on another replica is
/// seen at the next poll, the pause between polls doubling from 10ms up to 50ms.
async fn wait_for_first(ctx: &Context, request: &KeyedRequest) -> Result<Reservation, StoreError> {
    let storage_key = request.key.storage_key();
    let notify = ctx.waiters.subscribe(storage_key);
    let deadline = Instant::now() + ctx.policy.wait_timeout;
    let mut pause = WAIT_FIRST_PAUSE;
    let still_waiting = |first: &InFlightRecord| {
        request.is_same_as(&first.fingerprint, &ctx.policy) && Instant::now() < deadline
    };
    let result = loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match reserve(ctx, request).await {
            Ok(Reservation::InFlight(r)) if still_waiting(&r) => {}
            other => break other,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(pause.min(left), notified).await;
        pause = (pause * 2).min(WAIT_MAX_PAUSE);
    };
    ctx.waiters.unsubscribe(storage_key, notify);
    result
}

/// The store could not answer: refuse (`fail_closed`) or forward undeduplicated (`fail_open`).
async fn store_failed<S, B>(
    ctx: &Context,
    inner: S,
    request: KeyedRequest,
    error: StoreError,
) -> (Response<Body>, Outcome)
where
    S: Inner<B>,
    B: AnswerBody,
{
    let policy = &ctx.policy;
    tracing::warn!(route = %policy.route, key = %request.key.log_id(), error = %ErrorChain(&error), "store unavailable");
    // A record that cannot be decoded is there, or a call whose reservation a machine crash
    // lost may still be running: forwarding could run the operation a second time, so both
    // are refused even under fail_open.
    let refuse = matches!(error, StoreError::Corrupt(_) | StoreError::Recovering(_));
    if refuse || policy.on_store_error == StoreErrorPolicy::FailClosed {
        let mut refused = Problem::StoreUnavailable.into_response();
        if let StoreError::Recovering(wait) = error {
            let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
            refused
                .headers_mut()
                .insert(http::header::RETRY_AFTER, seconds.into());
        }
        return (refused, Outcome::Rejected);
    }
    ctx.metrics.failed_open();
    let response = pass_through(inner, request.into_request()).await;
    (response, Outcome::Bypassed)
}
