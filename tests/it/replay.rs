//! The life of a keyed request through the proxy, against a real upstream over sockets:
//! first run, replay, refusals and the problem types of docs/reference.md#problems.

use crate::common;

use common::proxy::TestProxy;
use common::upstream::TestUpstream;

#[tokio::test]
async fn replay_is_byte_for_byte_with_the_replayed_marker() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let first = proxy
        .client
        .post("/v1/charges?cookie=1", "charge-1", r#"{"amount":100}"#)
        .await;
    let again = proxy
        .client
        .post("/v1/charges?cookie=1", "charge-1", r#"{"amount":100}"#)
        .await;

    assert_eq!(first.status, 201);
    assert!(!first.replayed());
    assert!(
        first.header("set-cookie").is_some(),
        "the first client gets the upstream's cookie"
    );
    assert_eq!(again.status, first.status);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("x-execution"), first.header("x-execution"));
    assert_eq!(again.header("content-type"), Some("application/json"));
    let multi: Vec<_> = again.headers.get_all("x-multi").iter().collect();
    assert_eq!(multi, ["one", "two"]);
    assert!(again.replayed());
    assert!(
        again.header("set-cookie").is_none(),
        "a session cookie is never replayed"
    );
    assert_eq!(upstream.executions_of("charge-1"), 1);
}

#[tokio::test]
async fn upstream_500_is_an_answer_and_is_replayed() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let first = proxy.client.post("/v1/x?status=500", "k500", "{}").await;
    let again = proxy.client.post("/v1/x?status=500", "k500", "{}").await;
    assert_eq!(first.status, 500);
    assert_eq!(again.status, 500);
    assert!(again.replayed());
    assert_eq!(upstream.executions_of("k500"), 1);
}

#[tokio::test]
async fn release_on_statuses_free_the_key_for_a_retry() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    for status in [503, 429] {
        let key = format!("busy-{status}");
        let first = proxy
            .client
            .post(&format!("/v1/x?status={status}"), &key, "{}")
            .await;
        assert_eq!(first.status, status);
        let retry = proxy
            .client
            .post(&format!("/v1/x?status={status}"), &key, "{}")
            .await;
        assert!(!retry.replayed());
        assert_eq!(
            upstream.executions_of(&key),
            2,
            "status {status} must not be stored"
        );
    }
}

#[tokio::test]
async fn same_key_with_another_body_is_key_reused() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    proxy
        .client
        .post("/v1/charges", "reused", r#"{"amount":100}"#)
        .await;
    let other_body = proxy
        .client
        .post("/v1/charges", "reused", r#"{"amount":999}"#)
        .await;
    let other_path = proxy
        .client
        .post("/v1/refunds", "reused", r#"{"amount":100}"#)
        .await;
    assert_eq!(other_body.status, 422);
    assert_eq!(other_body.problem_type(), "key-reused");
    assert_eq!(other_path.status, 422);
    assert_eq!(upstream.executions_of("reused"), 1);
}

#[tokio::test]
async fn missing_key_is_refused_only_where_required() {
    let upstream = TestUpstream::start().await;
    let strict = TestProxy::in_front_of(&upstream.url(), "require_key = true").await;
    let refused = strict.client.send("POST", "/v1/charges", &[], "{}").await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.problem_type(), "missing-key");
    assert!(upstream.seen().is_empty());

    let lenient = TestProxy::in_front_of(&upstream.url(), "").await;
    for _ in 0..2 {
        let passed = lenient.client.send("POST", "/v1/charges", &[], "{}").await;
        assert_eq!(passed.status, 201);
        assert!(!passed.replayed());
    }
    assert_eq!(
        upstream.seen().len(),
        2,
        "without a key nothing is deduplicated"
    );
}

#[tokio::test]
async fn invalid_keys_are_refused_before_the_upstream() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let long = "k".repeat(256);
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("idempotency-key", long.as_str())],
        vec![("idempotency-key", "a"), ("idempotency-key", "b")],
        vec![("idempotency-key", "\"unterminated")],
        vec![("idempotency-key", "has space")],
        vec![("idempotency-key", "\"\"")],
    ];
    for headers in cases {
        let answer = proxy.client.send("POST", "/v1/x", &headers, "{}").await;
        assert_eq!(answer.status, 400, "{headers:?}");
        assert_eq!(answer.problem_type(), "invalid-key");
    }
    assert!(upstream.seen().is_empty());
}

#[tokio::test]
async fn quoted_and_bare_keys_name_the_same_operation() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let bare = proxy
        .client
        .send("POST", "/v1/x", &[("idempotency-key", "8e03978e")], "{}")
        .await;
    let quoted = proxy
        .client
        .send(
            "POST",
            "/v1/x",
            &[("idempotency-key", "\"8e03978e\"")],
            "{}",
        )
        .await;
    assert_eq!(bare.status, 201);
    assert!(quoted.replayed());
    assert_eq!(quoted.body, bare.body);
}

#[tokio::test]
async fn body_over_the_limit_is_refused_and_reserves_nothing() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "max_request_body = \"16B\"").await;
    let large = proxy
        .client
        .post("/v1/x", "big", "01234567890123456789")
        .await;
    assert_eq!(large.status, 413);
    assert_eq!(large.problem_type(), "body-too-large");
    let small = proxy.client.post("/v1/x", "big", "0123").await;
    assert_eq!(
        small.status, 201,
        "the refused request must not have reserved the key"
    );
    assert!(!small.replayed());
}

#[tokio::test]
async fn methods_the_route_does_not_cover_pass_straight_through() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    for _ in 0..2 {
        let answer = proxy
            .client
            .send("PUT", "/v1/x", &[("idempotency-key", "put-1")], "{}")
            .await;
        assert!(!answer.replayed());
    }
    assert_eq!(upstream.executions_of("put-1"), 2);
}

#[tokio::test]
async fn clients_with_one_key_are_kept_apart_by_scope_header() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "scope_header = \"Authorization\"").await;
    let send = |auth: &'static str| {
        let client = proxy.client.clone();
        async move {
            client
                .send(
                    "POST",
                    "/v1/x",
                    &[("idempotency-key", "shared"), ("authorization", auth)],
                    "{}",
                )
                .await
        }
    };
    let alice = send("Bearer alice").await;
    let bob = send("Bearer bob").await;
    let alice_again = send("Bearer alice").await;
    assert!(!bob.replayed(), "bob must never see alice's response");
    assert_ne!(alice.header("x-execution"), bob.header("x-execution"));
    assert!(alice_again.replayed());
    assert_eq!(alice_again.body, alice.body);
    assert_eq!(upstream.executions_of("shared"), 2);
}

#[tokio::test]
async fn published_problem_base_types_and_links_every_problem() {
    let upstream = TestUpstream::start().await;
    let toml = format!(
        "upstream = \"{}\"\nproblem_base = \"https://api.example.com/docs/idempotency#\"\n[defaults]\nrequire_key = true\n",
        upstream.url()
    );
    let proxy = TestProxy::start(
        &toml,
        std::sync::Arc::new(idempotency_proxy::store::MemoryStore::new()),
    )
    .await;
    let answer = proxy.client.send("POST", "/v1/x", &[], "{}").await;
    assert_eq!(
        answer.json()["type"],
        "https://api.example.com/docs/idempotency#missing-key"
    );
    assert_eq!(
        answer.header("link"),
        Some("<https://api.example.com/docs/idempotency#>; rel=\"describedby\"")
    );
    assert_eq!(answer.json()["status"], 400);
}
