//! An outcome that reaches the store after its holder's lease ran out, while nobody else has
//! taken the key: it is still kept, so a retry gets the replay and the operation runs once.
//!
//! Two ways to get there, both seen in the fault campaign (`benches/chaos`): a Redis that stalls
//! for longer than the lease (the holder's renewals and its completion wait in the socket, and
//! find the lease expired when Redis resumes), and a proxy stopped for longer than the lease
//! while it works (alone on its file store, so nobody can take the key meanwhile). Either way
//! the operation has run and the proxy gives its answer to the client; were the outcome
//! dropped, the key would be free and the client's next retry would run it again.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::binary::start_binary;
use common::proxy::TestProxy;
use common::redis::unique_prefix;
use common::redis_server::RedisServer;
use common::signal;
use common::upstream::TestUpstream;
use idempotency_proxy::store::{RedisStore, Store};

const BODY: &str = r#"{"amount":42}"#;

#[tokio::test]
async fn an_outcome_stored_after_a_redis_stall_longer_than_the_lease_is_replayed() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = proxy_over(&redis, &upstream).await;

    let client = proxy.client.clone();
    let headers = [("idempotency-key", "late"), ("x-delay-ms", "300")];
    let first =
        tokio::spawn(async move { client.send("POST", "/v1/charges", &headers, BODY).await });
    upstream.until_executed("late").await;
    // Redis stalls while the upstream works, and for three leases after: the completion and
    // the renewals wait in the socket, and find the lease expired when Redis resumes.
    redis.pause();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.resume();

    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .expect("the first request is answered once Redis resumes")
        .unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    let retry = proxy.client.post("/v1/charges", "late", BODY).await;
    assert_eq!(
        upstream.executions_of("late"),
        1,
        "the retry ran the operation again: {retry:?}"
    );
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
}

#[tokio::test]
async fn an_outcome_is_stored_once_a_restarted_redis_is_back() {
    let Some(mut redis) = RedisServer::start().await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = proxy_over(&redis, &upstream).await;

    let client = proxy.client.clone();
    let headers = [("idempotency-key", "restarted"), ("x-delay-ms", "300")];
    let first =
        tokio::spawn(async move { client.send("POST", "/v1/charges", &headers, BODY).await });
    upstream.until_executed("restarted").await;
    // Down while the upstream works and for a while after, longer than a few quick retries;
    // it comes back empty, the reservation gone with everything else.
    redis.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.restart().await;

    let first = tokio::time::timeout(Duration::from_secs(15), first)
        .await
        .expect("the first request is answered once Redis is back")
        .unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    let retry = proxy.client.post("/v1/charges", "restarted", BODY).await;
    assert_eq!(
        upstream.executions_of("restarted"),
        1,
        "the retry ran the operation again: {retry:?}"
    );
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
}

#[tokio::test]
async fn a_proxy_stopped_past_its_lease_keeps_the_outcome_when_nobody_took_the_key() {
    let upstream = TestUpstream::start().await;
    let dir = std::env::temp_dir().join(format!("idempotency-proxy-late-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("lease.toml");
    let lease = format!(
        "upstream = \"{}\"\n[defaults]\nlease = \"300ms\"\n",
        upstream.url()
    );
    std::fs::write(&config, lease).unwrap();
    let store = format!("file:{}", dir.join("store.db").display());
    let args = ["--store", &store, "--config", config.to_str().unwrap()];
    let (proxy, client) = start_binary(&upstream.url(), &args).await;

    let first_client = client.clone();
    let headers = [("idempotency-key", "stopped"), ("x-delay-ms", "200")];
    let first = tokio::spawn(async move {
        first_client
            .send("POST", "/v1/charges", &headers, BODY)
            .await
    });
    upstream.until_executed("stopped").await;
    // Stopped while the upstream works, for four leases: the upstream's answer waits in the
    // socket, and the lease has expired by the time the proxy reads it.
    let pid = proxy.id().expect("the proxy runs");
    signal::send(pid, "STOP");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    signal::send(pid, "CONT");

    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    let retry = client.post("/v1/charges", "stopped", BODY).await;
    assert_eq!(
        upstream.executions_of("stopped"),
        1,
        "the retry ran the operation again: {retry:?}"
    );
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, first.body);
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The proxy in front of `upstream` over the private Redis, with a short lease, replaying from
/// Redis rather than from its memory of its own answers.
async fn proxy_over(redis: &RedisServer, upstream: &TestUpstream) -> TestProxy {
    let store = RedisStore::connect(&redis.url(), &unique_prefix("late"))
        .await
        .expect("the private Redis answers");
    let store: Arc<dyn Store> = Arc::new(store);
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\nlease = \"500ms\"\nreplay_cache_ttl = \"0s\"\n",
        upstream.url()
    );
    TestProxy::start(&toml, store).await
}
