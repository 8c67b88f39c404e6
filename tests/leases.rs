//! Leases: renewed while the upstream works, so a slow upstream never lets a duplicate in; and
//! fenced, so a holder whose lease was taken over can never overwrite the newer record.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use idempotency_proxy::model::{CompletedRecord, FencingToken, Fingerprint, Record, ScopedKey};
use idempotency_proxy::store::{Fenced, MemoryStore, Reservation, Store, StoreError};

/// A store whose holders cannot renew: what a proxy paused by a long GC or a network partition
/// looks like to everyone else.
#[derive(Debug, Default)]
struct NoRenewals(MemoryStore);

#[async_trait]
impl Store for NoRenewals {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fp: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        self.0.reserve(key, fp, lease).await
    }
    async fn renew(
        &self,
        _: &ScopedKey,
        _: FencingToken,
        _: Duration,
    ) -> Result<Fenced, StoreError> {
        Err(StoreError::Unavailable("partitioned".into()))
    }
    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        self.0.complete(key, record, ttl).await
    }
    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        self.0.release(key, token).await
    }
    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        self.0.get(key).await
    }
    async fn remove(&self, key: &ScopedKey) -> Result<bool, StoreError> {
        self.0.remove(key).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }
}

#[tokio::test]
async fn a_renewed_lease_keeps_duplicates_out_of_a_slow_upstream() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "lease = \"300ms\"").await;
    let client = proxy.client.clone();
    let first =
        tokio::spawn(async move { client.post("/v1/x?delay_ms=1200", "slow-lease", "{}").await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    let duplicate = proxy
        .client
        .post("/v1/x?delay_ms=1200", "slow-lease", "{}")
        .await;
    assert_eq!(
        duplicate.status, 409,
        "the lease was renewed past its first 300ms"
    );
    assert_eq!(first.await.unwrap().status, 201);
    assert_eq!(upstream.executions_of("slow-lease"), 1);
}

#[tokio::test]
async fn a_holder_whose_lease_was_taken_over_cannot_overwrite_the_new_record() {
    let upstream = TestUpstream::start().await;
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\nlease = \"200ms\"\n",
        upstream.url()
    );
    let proxy = TestProxy::start(&toml, Arc::new(NoRenewals::default())).await;
    let client = proxy.client.clone();
    let slow = [("idempotency-key", "taken-over"), ("x-delay-ms", "900")];
    let paused = tokio::spawn(async move { client.send("POST", "/v1/x", &slow, "{}").await });
    tokio::time::sleep(Duration::from_millis(450)).await;

    // The successor is quick, so it completes well within its own (unrenewed) lease.
    let successor = proxy.client.post("/v1/x", "taken-over", "{}").await;
    assert_eq!(successor.status, 201, "the expired lease freed the key");
    let paused = paused.await.unwrap();
    assert_ne!(
        paused.header("x-execution"),
        successor.header("x-execution")
    );

    let retry = proxy.client.post("/v1/x", "taken-over", "{}").await;
    assert!(retry.replayed());
    assert_eq!(
        retry.header("x-execution"),
        successor.header("x-execution"),
        "the newer record stands"
    );
    assert_eq!(retry.body, successor.body);
}
