//! Routes, key sources and what crosses the proxy: prefixes and hosts, webhook key headers,
//! JSON-pointer keys, hop-by-hop headers, `X-Forwarded-*`, and HTTP/2 without TLS.

use crate::common;

use std::sync::Arc;

use axum::body::Body;
use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use http_body_util::BodyExt;
use idempotency_proxy::store::MemoryStore;

fn routes_config(payments: &str, hooks: &str) -> String {
    format!(
        r#"
[[routes]]
name = "payments"
path_prefix = "/v1/"
upstream = "{payments}"
require_key = true

[[routes]]
name = "github"
path_prefix = "/hooks/github"
upstream = "{hooks}"
key_header = "X-GitHub-Delivery"
on_ambiguous = "release"

[[routes]]
name = "stripe-events"
path_prefix = "/hooks/stripe"
upstream = "{hooks}"
key_body_pointer = "/id"

[[routes]]
name = "tenant-b"
path_prefix = "/v1/"
host = "b.example.com"
upstream = "{hooks}"
"#
    )
}

/// A payments upstream, a webhooks upstream, and the proxy in front of both with the routes above.
async fn routed() -> (TestUpstream, TestUpstream, TestProxy) {
    let payments = TestUpstream::start().await;
    let hooks = TestUpstream::start().await;
    let config = routes_config(&payments.url(), &hooks.url());
    let proxy = TestProxy::start(&config, Arc::new(MemoryStore::new())).await;
    (payments, hooks, proxy)
}

#[tokio::test]
async fn longest_prefix_and_host_pick_the_route_and_unmatched_is_404() {
    let (payments, hooks, proxy) = routed().await;

    let charge = proxy.client.post("/v1/charges", "c1", "{}").await;
    assert_eq!(charge.status, 201);
    assert_eq!(payments.seen().len(), 1);

    let tenant = proxy
        .client
        .send(
            "POST",
            "/v1/charges",
            &[("host", "B.example.com:8080"), ("idempotency-key", "c1")],
            "{}",
        )
        .await;
    assert_eq!(tenant.status, 201);
    assert!(!tenant.replayed(), "another route is another scope");
    assert_eq!(hooks.seen().len(), 1);

    let nowhere = proxy.client.post("/other", "k", "{}").await;
    assert_eq!(nowhere.status, 404);
    assert_eq!(nowhere.problem_type(), "no-route");
}

#[tokio::test]
async fn webhook_delivery_header_is_the_key() {
    let (payments, hooks, proxy) = routed().await;
    let delivery = [("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")];
    let first = proxy
        .client
        .send("POST", "/hooks/github", &delivery, r#"{"action":"opened"}"#)
        .await;
    let redelivery = proxy
        .client
        .send("POST", "/hooks/github", &delivery, r#"{"action":"opened"}"#)
        .await;
    assert_eq!(first.status, 201);
    assert!(redelivery.replayed());
    assert_eq!(hooks.seen().len(), 1);
    assert!(
        payments.seen().is_empty(),
        "a webhook never reaches the payments upstream"
    );
}

#[tokio::test]
async fn json_pointer_key_deduplicates_events_and_lets_keyless_bodies_through() {
    let (payments, hooks, proxy) = routed().await;
    let event = r#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"charge.succeeded"}"#;
    let first = proxy.client.send("POST", "/hooks/stripe", &[], event).await;
    let again = proxy.client.send("POST", "/hooks/stripe", &[], event).await;
    assert!(!first.replayed());
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    for _ in 0..2 {
        proxy
            .client
            .send("POST", "/hooks/stripe", &[], "not json")
            .await;
    }
    assert_eq!(
        hooks.seen().len(),
        3,
        "one event run once, and two keyless bodies each run"
    );
    assert_eq!(
        hooks.seen()[0].body,
        event.as_bytes(),
        "the body reaches the upstream unchanged"
    );
    assert!(
        payments.seen().is_empty(),
        "an event never reaches the payments upstream"
    );
}

#[tokio::test]
async fn hop_by_hop_headers_stay_behind_and_forwarded_headers_are_added() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let headers = [
        ("connection", "x-private"),
        ("x-private", "secret"),
        ("keep-alive", "timeout=5"),
        ("x-forwarded-for", "198.51.100.9"),
    ];
    proxy.client.send("GET", "/status", &headers, "").await;
    let seen = &upstream.seen()[0];
    assert!(seen.headers.get("x-private").is_none());
    assert!(seen.headers.get("keep-alive").is_none());
    assert_eq!(seen.headers["x-forwarded-for"], "198.51.100.9, 127.0.0.1");
    assert_eq!(seen.headers["x-forwarded-proto"], "http");
}

#[tokio::test]
async fn h2c_clients_are_served_and_deduplicated() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Body>();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let request = http::Request::post(format!("http://{}/v1/x", proxy.addr))
            .header("idempotency-key", "h2")
            .body(Body::from("{}"))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        assert_eq!(response.status(), 201);
        bodies.push(response.into_body().collect().await.unwrap().to_bytes());
    }
    assert_eq!(bodies[0], bodies[1]);
    assert_eq!(upstream.executions_of("h2"), 1);
}
