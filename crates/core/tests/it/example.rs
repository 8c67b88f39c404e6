//! The README's library example (`examples/axum.rs`), served on a real socket. It stacks no
//! `ProblemLayer`: the layer's own refusals still reach the client as problem documents.

#[path = "../../examples/axum.rs"]
#[allow(dead_code, unreachable_pub)]
mod axum_example;

use idempotency_test_support::client::TestClient;

#[tokio::test]
async fn the_axum_example_runs_its_handler_once_per_key() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TestClient::new(listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum_example::app()).await });
    let first = client.post("/v1/charges", "k1", "{\"amount\":100}").await;
    let retry = client.post("/v1/charges", "k1", "{\"amount\":100}").await;
    let other = client.post("/v1/charges", "k2", "{\"amount\":100}").await;
    assert_eq!(first.body, "charge 1");
    assert!(retry.replayed());
    assert_eq!(retry.body, "charge 1");
    assert_eq!(other.body, "charge 2");
    let unkeyed = client.send("POST", "/v1/charges", &[], "{}").await;
    assert_eq!(unkeyed.status, 400);
    assert_eq!(unkeyed.problem_type(), "missing-key");
}

#[tokio::test]
async fn a_service_without_a_problem_layer_answers_its_refusals_as_problem_json() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TestClient::new(listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum_example::app()).await });
    client.post("/v1/charges", "k1", "{\"amount\":100}").await;
    let reused = client.post("/v1/charges", "k1", "{\"amount\":999}").await;
    assert_eq!(reused.status, 422);
    assert_eq!(
        reused.header("content-type"),
        Some("application/problem+json")
    );
    let document = reused.json();
    assert_eq!(
        document["type"],
        "urn:problem-type:idempotency-proxy:key-reused"
    );
    assert_eq!(document["status"], 422);
    assert_eq!(document["differs"], serde_json::json!(["body"]));
}
