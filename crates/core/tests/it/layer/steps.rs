//! The steps of docs/reference.md#the-life-of-a-request as the layer takes them: admission, reservation, replay.

use axum::body::Body;
use http::{Method, Request, StatusCode};

use super::harness::{memory, policy, post, send, stack, Counting};

#[tokio::test]
async fn the_first_request_runs_and_every_retry_gets_its_answer() {
    let upstream = Counting::default();
    let service = stack(memory(), policy(), upstream.service());
    let first = send(&service, post(Some("k1"), "{\"amount\":1}")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    for _ in 0..3 {
        let retry = send(&service, post(Some("k1"), "{\"amount\":1}")).await;
        assert_eq!(retry.status, StatusCode::CREATED);
        assert!(retry.replayed());
        assert_eq!(retry.body, first.body, "byte for byte");
    }
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_missing_key_is_refused_where_the_route_requires_one() {
    let upstream = Counting::default();
    let mut required = policy();
    required.require_key = true;
    let service = stack(memory(), required, upstream.service());
    let answer = send(&service, post(None, "{}")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.problem_type(), "missing-key");
    assert_eq!(upstream.executions(), 0);
}

#[tokio::test]
async fn without_a_key_a_request_passes_through_each_time() {
    let upstream = Counting::default();
    let service = stack(memory(), policy(), upstream.service());
    for _ in 0..2 {
        let answer = send(&service, post(None, "{}")).await;
        assert_eq!(answer.status, StatusCode::CREATED);
        assert!(!answer.replayed());
    }
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn methods_the_route_does_not_cover_pass_through() {
    let upstream = Counting::default();
    let service = stack(memory(), policy(), upstream.service());
    for _ in 0..2 {
        let request = Request::builder()
            .method(Method::PUT)
            .uri("/v1/charges/1")
            .header("idempotency-key", "k-put")
            .body(Body::from("{}"))
            .unwrap();
        assert!(!send(&service, request).await.replayed());
    }
    assert_eq!(upstream.executions(), 2);
}

#[tokio::test]
async fn an_invalid_key_is_refused() {
    let upstream = Counting::default();
    let service = stack(memory(), policy(), upstream.service());
    let answer = send(&service, post(Some("two words"), "{}")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.problem_type(), "invalid-key");
    assert_eq!(upstream.executions(), 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_and_reserves_nothing() {
    let upstream = Counting::default();
    let mut small = policy();
    small.max_request_body = idempotency_core::policy::ByteSize::bytes(4);
    let service = stack(memory(), small, upstream.service());
    let answer = send(&service, post(Some("big"), "{\"x\":123}")).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.problem_type(), "body-too-large");
    let within = send(&service, post(Some("big"), "{}")).await;
    assert_eq!(within.status, StatusCode::CREATED, "the key was left free");
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn the_same_key_for_another_request_is_422_and_never_a_replay() {
    let upstream = Counting::default();
    let service = stack(memory(), policy(), upstream.service());
    send(&service, post(Some("k2"), "{\"amount\":1}")).await;
    let other = send(&service, post(Some("k2"), "{\"amount\":2}")).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(other.problem_type(), "key-reused");
    assert!(!other.replayed());
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn two_clients_with_one_key_never_see_each_others_answers() {
    let upstream = Counting::default();
    let mut scoped = policy();
    scoped.scope_header = Some(http::HeaderName::from_static("authorization"));
    let service = stack(memory(), scoped, upstream.service());
    let as_client = |token: &'static str| {
        let mut request = post(Some("shared"), "{}");
        let value = http::HeaderValue::from_static(token);
        request.headers_mut().insert("authorization", value);
        request
    };
    let alice = send(&service, as_client("Bearer alice")).await;
    let bob = send(&service, as_client("Bearer bob")).await;
    assert!(!bob.replayed());
    assert_ne!(alice.body, bob.body);
    assert!(send(&service, as_client("Bearer alice")).await.replayed());
    assert_eq!(upstream.executions(), 2);
}
