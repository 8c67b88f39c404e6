//! How long after the first request's answer a duplicate waiting on another replica
//! (`concurrent = "wait"`) gets the replay: the cost of polling the store instead of being
//! told. Two proxies in process share the Redis at `REDIS_URL` (default
//! `redis://127.0.0.1:6379`); the figures are printed.
//!
//! `cargo bench --bench wake_delay`

/// The integration tests' in-process proxy and upstream, of which this uses a part.
#[path = "../tests/it/common"]
mod common {
    pub(crate) use idempotency_test_support::{client, poll, redis};
    #[path = "proxy.rs"]
    #[allow(dead_code)] // what only the tests use
    pub(crate) mod proxy;
    #[path = "upstream.rs"]
    #[allow(dead_code)] // what only the tests use
    pub(crate) mod upstream;
}

use std::sync::Arc;
use std::time::Duration;

use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use idempotency_proxy::store::Store;

const ROUNDS: u64 = 20;

#[tokio::main]
async fn main() {
    let upstream = TestUpstream::start().await;
    let Some(store) = common::redis::store("wake_delay").await else {
        return;
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\nconcurrent = \"wait\"\nwait_timeout = \"10s\"\n",
        upstream.url()
    );
    let a = TestProxy::start(&toml, store.clone()).await;
    let b = TestProxy::start(&toml, store).await;
    let mut delays = Vec::new();
    for round in 0..ROUNDS {
        delays.push(one_round(&a, &b, round).await);
    }
    delays.sort();
    println!(
        "wake delay across replicas over {ROUNDS} rounds: min {:?}, median {:?}, max {:?}",
        delays[0],
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
}

/// The first request goes to `a` and takes a while upstream; a duplicate sent to `b` while it
/// runs waits. Returns how long after `a`'s answer `b`'s replay came.
async fn one_round(a: &TestProxy, b: &TestProxy, round: u64) -> Duration {
    let key = format!("wake-{round}-{}", std::process::id());
    let first_client = a.client.clone();
    let first_key = key.clone();
    let delay = format!("{}", 300 + round * 37);
    let first = tokio::spawn(async move {
        let headers = [
            ("idempotency-key", first_key.as_str()),
            ("x-delay-ms", delay.as_str()),
        ];
        first_client.send("POST", "/v1/x", &headers, "{}").await;
        tokio::time::Instant::now()
    });
    // The duplicate only has to arrive while the first is upstream (300ms or more).
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waiter = b.client.post_owned("/v1/x", &key, "{}").await;
    let replayed_at = tokio::time::Instant::now();
    assert!(waiter.replayed());
    replayed_at.saturating_duration_since(first.await.unwrap())
}
