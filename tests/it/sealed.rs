//! Encryption at rest against a real Redis: what a dump of the store shows, replays through
//! the seal, key rotation, and a record copied under another key.

use crate::common;

use std::sync::Arc;

use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use common::{answer::Answer, redis};
use idempotency_proxy::store::RedisStore;

const AUTH: (&str, &str) = ("authorization", "Bearer client-a");

/// Writes a 32-byte key as hex to a file of its own and returns the config reference.
fn key_ref(name: &str, byte: u8) -> String {
    let path = std::env::temp_dir().join(format!(
        "idempotency-proxy-sealed-{name}-{}",
        std::process::id()
    ));
    std::fs::write(&path, format!("{byte:02x}").repeat(32)).unwrap();
    format!("file:{}", path.display())
}

/// A proxy config sealing with `current` and opening with `old` too. The local replay cache
/// is off so every replay goes through the store.
fn config(upstream: &TestUpstream, current: &str, old: &[&str]) -> String {
    let old: Vec<String> = old.iter().map(|k| format!("\"{k}\"")).collect();
    format!(
        "upstream = \"{}\"\nencryption_key = \"{current}\"\nencryption_old_keys = [{}]\n\
         [defaults]\nscope_header = \"Authorization\"\nreplay_cache_ttl = \"0s\"\n",
        upstream.url(),
        old.join(", ")
    )
}

async fn start(toml: &str, prefix: &str) -> TestProxy {
    let store = RedisStore::connect(&redis::url(), prefix).await.unwrap();
    TestProxy::start(toml, Arc::new(store)).await
}

async fn post(proxy: &TestProxy, key: &str) -> Answer {
    let headers = [AUTH, ("idempotency-key", key)];
    let body = r#"{"card":"4242424242424242"}"#;
    proxy
        .client
        .send("POST", "/v1/charges", &headers, body)
        .await
}

/// Every key under the prefix, and its value.
async fn dump(prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut conn = redis::connection().await.unwrap();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut entries = Vec::new();
    for key in keys {
        let value: Vec<u8> = ::redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        entries.push((key, value));
    }
    entries
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn a_dump_of_redis_shows_no_body_and_no_raw_key_and_replays_are_exact() {
    let Some((_, prefix)) = redis::store_with_prefix("sealed-dump").await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = start(&config(&upstream, &key_ref("dump", 0x11), &[]), &prefix).await;
    let first = post(&proxy, "order-raw-key-4711").await;
    let again = post(&proxy, "order-raw-key-4711").await;
    assert_eq!(first.status, 201);
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("content-type"), first.header("content-type"));
    assert_eq!(again.header("x-execution"), first.header("x-execution"));
    assert_eq!(upstream.executions_of("order-raw-key-4711"), 1);

    let entries = dump(&prefix).await;
    assert_eq!(entries.len(), 1, "one record");
    let (name, value) = &entries[0];
    assert!(!name.contains("order-raw-key-4711"), "{name}");
    for needle in [
        &first.body[..],
        b"\"execution\"",
        b"application/json",
        b"x-multi",
    ] {
        assert!(!contains(value, needle), "the dump shows {needle:?}");
    }
    assert!(!contains(value, b"Bearer client-a"));
}

#[tokio::test]
async fn records_sealed_under_an_old_key_replay_after_rotation() {
    let Some((_, prefix)) = redis::store_with_prefix("sealed-rotation").await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let (old, new, other) = (
        key_ref("old", 0x21),
        key_ref("new", 0x22),
        key_ref("other", 0x23),
    );
    let before = start(&config(&upstream, &old, &[]), &prefix).await;
    let first = post(&before, "before-rotation").await;
    before.shutdown().await;

    let after = start(&config(&upstream, &new, &[&old]), &prefix).await;
    let replay = post(&after, "before-rotation").await;
    assert!(replay.replayed(), "{replay:?}");
    assert_eq!(replay.body, first.body);
    let fresh = post(&after, "after-rotation").await;
    assert_eq!(fresh.status, 201);
    after.shutdown().await;

    // The old key dropped too soon: its records cannot be opened, and are never run again.
    let dropped = start(&config(&upstream, &new, &[&other]), &prefix).await;
    let refused = post(&dropped, "before-rotation").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.problem_type(), "store-unavailable");
    assert!(post(&dropped, "after-rotation").await.replayed());
    assert_eq!(upstream.executions_of("before-rotation"), 1);
}

#[tokio::test]
async fn a_record_copied_under_another_key_is_refused_not_replayed() {
    let Some((_, prefix)) = redis::store_with_prefix("sealed-moved").await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = start(&config(&upstream, &key_ref("moved", 0x31), &[]), &prefix).await;
    let victim = post(&proxy, "victim").await;
    let victim_name = dump(&prefix).await.remove(0).0;
    let thief = post(&proxy, "thief").await;
    assert_ne!(thief.body, victim.body);
    let thief_name = dump(&prefix)
        .await
        .into_iter()
        .map(|(name, _)| name)
        .find(|name| *name != victim_name)
        .unwrap();

    // Same request body, same fingerprint: only the seal's associated data tells them apart.
    let mut conn = redis::connection().await.unwrap();
    let copied: i64 = ::redis::cmd("COPY")
        .arg(&victim_name)
        .arg(&thief_name)
        .arg("REPLACE")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(copied, 1);
    let answer = post(&proxy, "thief").await;
    assert_eq!(answer.status, 503);
    assert_eq!(answer.problem_type(), "store-unavailable");
    assert!(!contains(&answer.body, &victim.body));
    assert!(post(&proxy, "victim").await.replayed());
}
