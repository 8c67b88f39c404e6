//! Signed webhooks, one sender scheme at a time, with signatures computed here as the senders
//! compute them: a good delivery runs once and is deduplicated; a forged, unsigned or stale
//! one is refused with `401 bad-signature` before anything reaches the upstream, and leaves its
//! key free for the genuine delivery.

use crate::common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use common::answer::Answer;
use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use hmac::{Hmac, Mac};
use idempotency_proxy::store::MemoryStore;
use sha2::Sha256;

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A proxy with one route `/hooks` verifying `scheme` with the secret `secret`.
async fn proxy(upstream: &TestUpstream, scheme: &str, key_source: &str, secret: &str) -> TestProxy {
    let path = std::env::temp_dir().join(format!(
        "idempotency-proxy-webhook-{scheme}-{}",
        std::process::id()
    ));
    std::fs::write(&path, secret).unwrap();
    let toml = format!(
        "[[routes]]\nname = \"hooks\"\npath_prefix = \"/hooks\"\nupstream = \"{}\"\n{key_source}\n\
         scope_header = \"\"\non_ambiguous = \"release\"\n\
         [routes.verify]\nscheme = \"{scheme}\"\nsecret = \"file:{}\"\n",
        upstream.url(),
        path.display()
    );
    TestProxy::start(&toml, Arc::new(MemoryStore::new())).await
}

async fn deliver(proxy: &TestProxy, headers: &[(&str, &str)], body: &'static str) -> Answer {
    proxy.client.send("POST", "/hooks", headers, body).await
}

fn assert_refused(answer: &Answer) {
    assert_eq!(answer.status, 401, "{answer:?}");
    assert_eq!(answer.problem_type(), "bad-signature");
}

#[tokio::test]
async fn github_deliveries_are_verified_before_their_key_is_taken() {
    let upstream = TestUpstream::start().await;
    let secret = "gh-secret";
    let proxy = proxy(
        &upstream,
        "github",
        "key_header = \"X-GitHub-Delivery\"",
        secret,
    )
    .await;
    let body = r#"{"action":"opened"}"#;
    let good = format!(
        "sha256={}",
        hex::encode(hmac(secret.as_bytes(), &[body.as_bytes()]))
    );
    let forged = format!("sha256={}", hex::encode(hmac(b"guess", &[body.as_bytes()])));
    fn signed(sig: &str) -> [(&str, &str); 2] {
        [("x-github-delivery", "d-1"), ("x-hub-signature-256", sig)]
    }

    assert_refused(&deliver(&proxy, &signed(&forged), body).await);
    assert_refused(&deliver(&proxy, &[("x-github-delivery", "d-1")], body).await);
    assert_refused(&deliver(&proxy, &[], body).await);
    assert!(
        upstream.seen().is_empty(),
        "nothing forged reached the upstream"
    );

    let first = deliver(&proxy, &signed(&good), body).await;
    assert_eq!(first.status, 201, "the key was not poisoned");
    let again = deliver(&proxy, &signed(&good), body).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test]
async fn stripe_events_need_a_fresh_timestamp_and_a_matching_v1() {
    let upstream = TestUpstream::start().await;
    let secret = "whsec_stripe_test";
    let proxy = proxy(&upstream, "stripe", "key_body_pointer = \"/id\"", secret).await;
    let body = r#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let sign = |key: &[u8], t: u64| {
        let v1 = hex::encode(hmac(key, &[format!("{t}.").as_bytes(), body.as_bytes()]));
        format!("t={t},v1={},v1={v1}", "0".repeat(64))
    };
    let stale = sign(secret.as_bytes(), now() - 600);
    let forged = sign(b"guess", now());

    assert_refused(&deliver(&proxy, &[("stripe-signature", &stale)], body).await);
    assert_refused(&deliver(&proxy, &[("stripe-signature", &forged)], body).await);
    assert_refused(&deliver(&proxy, &[], body).await);
    assert!(upstream.seen().is_empty());

    let good = sign(secret.as_bytes(), now());
    let first = deliver(&proxy, &[("stripe-signature", &good)], body).await;
    assert_eq!(first.status, 201);
    let again = deliver(&proxy, &[("stripe-signature", &good)], body).await;
    assert!(again.replayed());
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test]
async fn standard_webhooks_sign_id_timestamp_and_body() {
    let upstream = TestUpstream::start().await;
    let base64 = base64::engine::general_purpose::STANDARD;
    let key = b"standard webhooks signing key!!";
    let secret = format!("whsec_{}", base64.encode(key));
    let proxy = proxy(
        &upstream,
        "standard-webhooks",
        "key_header = \"webhook-id\"",
        &secret,
    )
    .await;
    let body = r#"{"type":"invoice.paid"}"#;
    let sign = |id: &str, t: u64| {
        let content = format!("{id}.{t}.{body}");
        format!(
            "v1,bm90IGl0 v1,{}",
            base64.encode(hmac(key, &[content.as_bytes()]))
        )
    };
    fn headers<'a>(t: &'a str, sig: &'a str) -> [(&'a str, &'a str); 3] {
        [
            ("webhook-id", "msg_1"),
            ("webhook-timestamp", t),
            ("webhook-signature", sig),
        ]
    }
    let (t, stale) = (now().to_string(), (now() - 600).to_string());
    let good = sign("msg_1", now());
    let other_id = sign("msg_2", now());
    let old = sign("msg_1", now() - 600);

    assert_refused(&deliver(&proxy, &headers(&t, &other_id), body).await);
    assert_refused(&deliver(&proxy, &headers(&stale, &old), body).await);
    assert_refused(&deliver(&proxy, &[("webhook-id", "msg_1")], body).await);
    assert!(upstream.seen().is_empty());

    let first = deliver(&proxy, &headers(&t, &good), body).await;
    assert_eq!(first.status, 201, "{first:?}");
    let again = deliver(&proxy, &headers(&t, &good), body).await;
    assert!(again.replayed());
    assert_eq!(upstream.seen().len(), 1);
}
