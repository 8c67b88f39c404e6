//! Fingerprints that understand JSON, and a `422` that says what differed (docs/reference.md#fingerprints),
//! through the proxy over real sockets: a JSON body rebuilt on a retry, members left out of the
//! fingerprint, which part of a request differed, and records stored before part digests.

use crate::common;

use std::sync::Arc;

use common::answer::Answer;
use common::proxy::TestProxy;
use common::redis;
use common::upstream::TestUpstream;
use idempotency_proxy::store::RedisStore;
use sha2::{Digest, Sha256};

/// A payment as a client first sends it.
const SENT: &str = concat!(
    r#"{"amount": 1999, "currency": "eur", "#,
    r#""metadata": {"order": "1042", "request_time": "2024-05-01T12:00:00Z"}}"#
);
/// The same payment, rebuilt by the client for its retry: other member order, other
/// whitespace, another spelling of the same number.
const REBUILT: &str = concat!(
    "{\n  \"metadata\": {\"request_time\": \"2024-05-01T12:00:00Z\", \"order\": \"1042\"},\n",
    "  \"currency\": \"eur\",\n  \"amount\": 1.999e3\n}"
);

/// Two routes to one upstream: `/json/` fingerprints canonical JSON without the send time and
/// with the tenant header, `/bytes/` the body's bytes.
async fn proxy(upstream: &TestUpstream) -> TestProxy {
    let url = upstream.url();
    let toml = format!(
        r#"
[[routes]]
name = "json"
path_prefix = "/json/"
upstream = "{url}"
fingerprint_body = "json"
fingerprint_ignore = ["/metadata/request_time"]
fingerprint_headers = ["X-Tenant"]

[[routes]]
name = "bytes"
path_prefix = "/bytes/"
upstream = "{url}"
"#
    );
    TestProxy::start(
        &toml,
        Arc::new(idempotency_proxy::store::MemoryStore::new()),
    )
    .await
}

async fn send(proxy: &TestProxy, method: &str, path: &str, key: &str, body: &str) -> Answer {
    let headers = [("idempotency-key", key), ("x-tenant", "acme")];
    proxy
        .client
        .send(method, path, &headers, body.to_owned())
        .await
}

/// The `differs` member of a `422 key-reused` answer.
#[track_caller]
fn differs(answer: &Answer) -> Vec<String> {
    assert_eq!(answer.status, 422, "{answer:?}");
    assert_eq!(answer.problem_type(), "key-reused");
    let document = answer.json();
    let parts = document["differs"].as_array().expect("differs is an array");
    parts
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_rebuilt_json_body_replays_under_json_and_is_key_reused_under_bytes() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream).await;
    let first = send(&proxy, "POST", "/json/charges", "pay-1", SENT).await;
    let retry = send(&proxy, "POST", "/json/charges", "pay-1", REBUILT).await;
    assert_eq!(first.status, 201);
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    assert_eq!(upstream.executions_of("pay-1"), 1);

    let first = send(&proxy, "POST", "/bytes/charges", "pay-2", SENT).await;
    let retry = send(&proxy, "POST", "/bytes/charges", "pay-2", REBUILT).await;
    assert_eq!(first.status, 201);
    assert_eq!(differs(&retry), ["body"]);
    assert_eq!(upstream.executions_of("pay-2"), 1);
}

#[tokio::test]
async fn an_ignored_member_may_change_and_any_other_change_is_the_body() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream).await;
    send(&proxy, "POST", "/json/charges", "pay-3", SENT).await;
    let later = SENT.replace("12:00:00Z", "12:00:07Z");
    let retry = send(&proxy, "POST", "/json/charges", "pay-3", &later).await;
    assert!(retry.replayed(), "{retry:?}");
    let other_amount = SENT.replace("1999", "2999");
    let changed = send(&proxy, "POST", "/json/charges", "pay-3", &other_amount).await;
    assert_eq!(differs(&changed), ["body"]);
    let other_order = SENT.replace("1042", "1043");
    let changed = send(&proxy, "POST", "/json/charges", "pay-3", &other_order).await;
    assert_eq!(differs(&changed), ["body"]);
    assert_eq!(upstream.executions_of("pay-3"), 1);
}

#[tokio::test]
async fn a_mismatch_names_each_part_that_differed_and_nothing_else() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream).await;
    send(&proxy, "POST", "/json/charges", "pay-4", SENT).await;

    let other_tenant = [("idempotency-key", "pay-4"), ("x-tenant", "globex")];
    let answer = proxy
        .client
        .send("POST", "/json/charges", &other_tenant, SENT)
        .await;
    assert_eq!(differs(&answer), ["headers"]);
    let answer = send(&proxy, "POST", "/json/refunds", "pay-4", SENT).await;
    assert_eq!(differs(&answer), ["target"]);
    let answer = send(&proxy, "PATCH", "/json/charges", "pay-4", SENT).await;
    assert_eq!(differs(&answer), ["method"]);
    let answer = send(&proxy, "POST", "/json/charges?x=1", "pay-4", "{}").await;
    assert_eq!(differs(&answer), ["target", "body"]);
    assert!(
        !String::from_utf8_lossy(&answer.body).contains("globex"),
        "never a value"
    );
    assert_eq!(upstream.executions_of("pay-4"), 1);
}

#[tokio::test]
async fn a_body_that_is_not_json_counts_by_its_bytes() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream).await;
    send(
        &proxy,
        "POST",
        "/json/forms",
        "form-1",
        "amount=100&currency=eur",
    )
    .await;
    let retry = send(
        &proxy,
        "POST",
        "/json/forms",
        "form-1",
        "amount=100&currency=eur",
    )
    .await;
    assert!(retry.replayed(), "{retry:?}");
    let spaced = send(
        &proxy,
        "POST",
        "/json/forms",
        "form-1",
        "amount=100&currency=eur ",
    )
    .await;
    assert_eq!(differs(&spaced), ["body"]);
}

#[tokio::test]
async fn the_admin_view_shows_the_part_digests() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream).await;
    send(&proxy, "POST", "/json/charges", "pay-5", SENT).await;
    send(&proxy, "POST", "/json/charges", "pay-6", REBUILT).await;
    let view = |key: &'static str| {
        let admin = proxy.admin.clone();
        async move {
            let answer = admin
                .send("GET", &format!("/keys/json/{key}"), &[], "")
                .await;
            assert_eq!(answer.status, 200, "{answer:?}");
            answer.json()
        }
    };
    let (first, second) = (view("pay-5").await, view("pay-6").await);
    let parts = &first["fingerprint_parts"];
    for part in ["method", "target", "headers", "body"] {
        let hex = parts[part]
            .as_str()
            .unwrap_or_else(|| panic!("{part}: {first}"));
        assert_eq!(hex.len(), 16, "{part}: {hex}");
    }
    assert_eq!(
        first["fingerprint"], second["fingerprint"],
        "the same request"
    );
    assert_eq!(first["fingerprint_parts"], second["fingerprint_parts"]);
}

/// A completed record as the encoder wrote it before part digests: version 1, state, token,
/// one SHA-256 over the length-prefixed method, target and body (no headers named), creation
/// time, then status, headers and a kept body. `completed` false gives the in-flight record.
fn stored_the_old_way(target: &str, body: &str, completed: bool) -> Vec<u8> {
    let mut digest = Sha256::new();
    for field in ["POST", target, body] {
        digest.update((field.len() as u64).to_be_bytes());
        digest.update(field);
    }
    let mut raw = vec![1, u8::from(completed)];
    raw.extend_from_slice(&0x5EED_u64.to_be_bytes());
    raw.extend_from_slice(&digest.finalize());
    raw.extend_from_slice(&1_700_000_000_000_u64.to_be_bytes());
    if completed {
        raw.extend_from_slice(&201u16.to_be_bytes());
        raw.extend_from_slice(&1u16.to_be_bytes());
        let (name, value) = ("x-execution", "7");
        raw.extend_from_slice(&(name.len() as u16).to_be_bytes());
        raw.extend_from_slice(name.as_bytes());
        raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
        raw.extend_from_slice(value.as_bytes());
        let kept = br#"{"id":"ch_old"}"#;
        raw.push(0);
        raw.extend_from_slice(&(kept.len() as u32).to_be_bytes());
        raw.extend_from_slice(kept);
    }
    raw
}

#[tokio::test]
async fn records_stored_before_part_digests_replay_and_a_mismatch_names_no_part() {
    let Some(mut conn) = redis::connection().await else {
        return;
    };
    let prefix = redis::unique_prefix("old-fingerprints");
    let store = RedisStore::connect(&redis::url(), &prefix).await.unwrap();
    let upstream = TestUpstream::start().await;
    let toml = format!("upstream = \"{}\"\n", upstream.url());
    let proxy = TestProxy::start(&toml, Arc::new(store)).await;
    for (key, completed) in [("old-done", true), ("old-running", false)] {
        let raw = stored_the_old_way("/v1/charges", r#"{"amount":100}"#, completed);
        let name = format!("{prefix}default:-:{key}");
        let () = ::redis::cmd("SET")
            .arg(&name)
            .arg(raw)
            .arg("PX")
            .arg(60_000)
            .query_async(&mut conn)
            .await
            .unwrap();
    }

    let replay = proxy
        .client
        .post("/v1/charges", "old-done", r#"{"amount":100}"#)
        .await;
    assert_eq!(replay.status, 201);
    assert!(replay.replayed());
    assert_eq!(replay.header("x-execution"), Some("7"));
    assert_eq!(replay.body, r#"{"id":"ch_old"}"#);
    let other = proxy
        .client
        .post("/v1/charges", "old-done", r#"{"amount":200}"#)
        .await;
    assert!(differs(&other).is_empty(), "{other:?}");

    let running = proxy
        .client
        .post("/v1/charges", "old-running", r#"{"amount":100}"#)
        .await;
    assert_eq!(running.status, 409, "{running:?}");
    assert_eq!(running.problem_type(), "request-in-flight");
    let other = proxy
        .client
        .post("/v1/refunds", "old-running", r#"{"amount":100}"#)
        .await;
    assert!(differs(&other).is_empty(), "{other:?}");
    assert!(upstream.seen().is_empty(), "nothing ran again");

    let view = proxy
        .admin
        .send("GET", "/keys/default/old-done", &[], "")
        .await;
    assert_eq!(view.json()["fingerprint_parts"], serde_json::Value::Null);
}
