//! What the first request's outcome leaves behind (docs/reference.md#the-life-of-a-request, step 5), and what a
//! duplicate gets while it runs. A `tower-test` mock stands for the upstream, so the test
//! decides when, and how, the first request ends.

use std::time::Duration;

use axum::body::Body;
use http::{Response, StatusCode};
use idempotency_core::policy::{AmbiguousPolicy, ConcurrentPolicy};
use idempotency_core::RequestNotSent;
use tower::ServiceExt;
use tower_test::mock;

use super::harness::{memory, policy, post, read, send, stack};

type Handle = mock::Handle<http::Request<Body>, Response<Body>>;

fn answer(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
}

/// Answers the next request the upstream gets.
async fn respond(handle: &mut Handle, status: StatusCode, body: &'static str) {
    let (_, reply) = handle.next_request().await.expect("a request upstream");
    reply.send_response(answer(status, body));
}

#[tokio::test]
async fn a_duplicate_while_the_first_runs_gets_409_with_retry_after() {
    let (upstream, mut handle) = mock::pair();
    let service = stack(memory(), policy(), upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("slow"), "{}")));
    let (_, reply) = handle.next_request().await.unwrap();
    let duplicate = send(&service, post(Some("slow"), "{}")).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.problem_type(), "request-in-flight");
    assert_eq!(duplicate.headers["retry-after"], "1");
    reply.send_response(answer(StatusCode::CREATED, "done"));
    assert_eq!(read(first.await.unwrap().unwrap()).await.body, "done");
    assert!(send(&service, post(Some("slow"), "{}")).await.replayed());
}

#[tokio::test]
async fn in_wait_mode_the_duplicate_gets_the_first_answer_replayed() {
    let (upstream, mut handle) = mock::pair();
    let mut waiting = policy();
    waiting.concurrent = ConcurrentPolicy::Wait;
    let service = stack(memory(), waiting, upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("w"), "{}")));
    let (_, reply) = handle.next_request().await.unwrap();
    let duplicate = tokio::spawn(service.clone().oneshot(post(Some("w"), "{}")));
    tokio::task::yield_now().await;
    reply.send_response(answer(StatusCode::CREATED, "first"));
    let duplicate = read(duplicate.await.unwrap().unwrap()).await;
    assert_eq!(duplicate.status, StatusCode::CREATED);
    assert!(duplicate.replayed());
    assert_eq!(duplicate.body, "first");
    assert_eq!(read(first.await.unwrap().unwrap()).await.body, "first");
}

#[tokio::test(start_paused = true)]
async fn in_wait_mode_a_duplicate_that_waits_too_long_gets_409() {
    let (upstream, mut handle) = mock::pair();
    let mut waiting = policy();
    waiting.concurrent = ConcurrentPolicy::Wait;
    waiting.wait_timeout = Duration::from_millis(200);
    let service = stack(memory(), waiting, upstream);
    let _first = tokio::spawn(service.clone().oneshot(post(Some("long"), "{}")));
    let (_, _reply) = handle.next_request().await.unwrap();
    let duplicate = send(&service, post(Some("long"), "{}")).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
}

#[tokio::test(start_paused = true)]
async fn an_upstream_past_its_time_out_is_kept_as_504_and_replayed() {
    let (upstream, mut handle) = mock::pair();
    let mut impatient = policy();
    impatient.upstream_timeout = Duration::from_millis(200);
    let service = stack(memory(), impatient, upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("t"), "{}")));
    let (_, _never_answered) = handle.next_request().await.unwrap();
    let first = read(first.await.unwrap().unwrap()).await;
    assert_eq!(first.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(first.problem_type(), "upstream-timeout");
    let retry = send(&service, post(Some("t"), "{}")).await;
    assert!(retry.replayed());
    assert_eq!(
        retry.body, first.body,
        "the stored problem renders the same"
    );
}

#[tokio::test(start_paused = true)]
async fn with_release_a_time_out_frees_the_key() {
    let (upstream, mut handle) = mock::pair();
    let mut releasing = policy();
    releasing.upstream_timeout = Duration::from_millis(200);
    releasing.on_ambiguous = AmbiguousPolicy::Release;
    let service = stack(memory(), releasing, upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("r"), "{}")));
    let (_, _never_answered) = handle.next_request().await.unwrap();
    assert_eq!(
        first.await.unwrap().unwrap().status(),
        StatusCode::GATEWAY_TIMEOUT
    );
    let retry = tokio::spawn(service.clone().oneshot(post(Some("r"), "{}")));
    respond(&mut handle, StatusCode::CREATED, "ran again").await;
    assert_eq!(read(retry.await.unwrap().unwrap()).await.body, "ran again");
}

#[tokio::test]
async fn a_release_on_status_frees_the_key() {
    let (upstream, mut handle) = mock::pair();
    let service = stack(memory(), policy(), upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("busy"), "{}")));
    respond(&mut handle, StatusCode::TOO_MANY_REQUESTS, "later").await;
    assert_eq!(
        first.await.unwrap().unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let retry = tokio::spawn(service.clone().oneshot(post(Some("busy"), "{}")));
    respond(&mut handle, StatusCode::CREATED, "ok").await;
    let retry = read(retry.await.unwrap().unwrap()).await;
    assert!(!retry.replayed());
    assert_eq!(retry.body, "ok");
}

#[tokio::test]
async fn a_request_that_was_never_sent_frees_the_key() {
    let (upstream, mut handle) = mock::pair();
    let service = stack(memory(), policy(), upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("refused"), "{}")));
    let (_, reply) = handle.next_request().await.unwrap();
    reply.send_error(RequestNotSent("connection refused".into()));
    let first = read(first.await.unwrap().unwrap()).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert_eq!(first.problem_type(), "upstream-unavailable");
    let retry = tokio::spawn(service.clone().oneshot(post(Some("refused"), "{}")));
    respond(&mut handle, StatusCode::CREATED, "ran").await;
    assert!(!read(retry.await.unwrap().unwrap()).await.replayed());
}

#[tokio::test]
async fn a_break_after_sending_is_kept_so_a_retry_never_runs_it_twice() {
    let (upstream, mut handle) = mock::pair();
    let service = stack(memory(), policy(), upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("broke"), "{}")));
    let (_, reply) = handle.next_request().await.unwrap();
    reply.send_error("connection reset by peer");
    assert_eq!(
        first.await.unwrap().unwrap().status(),
        StatusCode::BAD_GATEWAY
    );
    let retry = send(&service, post(Some("broke"), "{}")).await;
    assert_eq!(retry.status, StatusCode::BAD_GATEWAY);
    assert!(retry.replayed());
}

#[tokio::test]
async fn a_client_that_hangs_up_does_not_stop_the_operation() {
    let (upstream, mut handle) = mock::pair();
    let service = stack(memory(), policy(), upstream);
    let impatient = tokio::spawn(service.clone().oneshot(post(Some("gone"), "{}")));
    let (_, reply) = handle.next_request().await.unwrap();
    impatient.abort();
    let _ = impatient.await;
    reply.send_response(answer(StatusCode::CREATED, "recorded"));
    // The outcome is recorded by the request's own task; give it its turn.
    let mut retry = send(&service, post(Some("gone"), "{}")).await;
    for _ in 0..100 {
        if retry.status != StatusCode::CONFLICT {
            break;
        }
        tokio::task::yield_now().await;
        retry = send(&service, post(Some("gone"), "{}")).await;
    }
    assert!(
        retry.replayed(),
        "the outcome was recorded although the client left"
    );
    assert_eq!(retry.body, "recorded");
}
