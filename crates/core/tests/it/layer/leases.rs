//! Leases under tokio's paused clock: renewed while the upstream works, so a slow upstream
//! never lets a duplicate in; fenced, so a holder whose lease was taken over can never
//! overwrite the newer record; and records that expire after their `ttl`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use http::{Response, StatusCode};
use idempotency_core::backend::{CompletedRecord, FencingToken, Fingerprint, Record, ScopedKey};
use idempotency_core::{
    backend::{Fenced, Removal, Removed, Reservation},
    MemoryStore, Store, StoreError,
};
use tower::ServiceExt;
use tower_test::mock;

use super::harness::{memory, policy, post, read, send, stack, Counting};

/// A store whose holders cannot renew: what a proxy paused by a long GC or a network partition
/// looks like to everyone else. Renewals fail at once, or with `hang`, never answer.
#[derive(Debug, Default)]
struct NoRenewals(MemoryStore, bool);

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
        if self.1 {
            std::future::pending::<()>().await;
        }
        Err(StoreError::unavailable("partitioned"))
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
    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        self.0.remove(key, removal).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }
}

fn answer(body: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::CREATED;
    response
}

#[tokio::test(start_paused = true)]
async fn a_renewed_lease_keeps_duplicates_out_of_a_slow_upstream() {
    let (upstream, mut handle) = mock::pair();
    let mut short = policy();
    short.lease = Duration::from_millis(300);
    short.upstream_timeout = Duration::from_secs(60);
    let service = stack(memory(), short, upstream);
    let first = tokio::spawn(service.clone().oneshot(post(Some("slow"), "{}")));
    let (_, reply) = handle.next_request().await.unwrap();
    // The paused clock runs every renewal in order on its way to 2 seconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let duplicate = send(&service, post(Some("slow"), "{}")).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT, "renewed past 300ms");
    reply.send_response(answer("once"));
    assert_eq!(read(first.await.unwrap().unwrap()).await.body, "once");
}

#[tokio::test(start_paused = true)]
async fn renewals_never_move_the_upstream_deadline() {
    // Renewals that succeed, that fail at once, and that never answer.
    let stores: [(&str, Arc<dyn Store>); 3] = [
        ("renewed", memory()),
        ("refused", Arc::new(NoRenewals(MemoryStore::new(), false))),
        ("hanging", Arc::new(NoRenewals(MemoryStore::new(), true))),
    ];
    for (renewals, store) in stores {
        let (upstream, mut handle) = mock::pair();
        let mut short = policy();
        short.lease = Duration::from_millis(300);
        short.upstream_timeout = Duration::from_secs(1);
        let service = stack(store, short, upstream);
        let started = tokio::time::Instant::now();
        let first = tokio::spawn(service.clone().oneshot(post(Some("late"), "{}")));
        let (_, _never_answered) = handle.next_request().await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), first)
            .await
            .unwrap_or_else(|_| panic!("no answer at all ({renewals})"))
            .unwrap()
            .unwrap();
        assert_eq!(answer.status(), StatusCode::GATEWAY_TIMEOUT, "{renewals}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_millis(1050),
            "answered at the deadline, not at a renewal's end ({renewals}: {waited:?})"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_lease_was_taken_over_cannot_overwrite_the_new_record() {
    let (upstream, mut handle) = mock::pair();
    let mut short = policy();
    short.lease = Duration::from_millis(200);
    short.upstream_timeout = Duration::from_secs(60);
    let store: Arc<dyn Store> = Arc::new(NoRenewals::default());
    let service = stack(store, short, upstream);
    let paused = tokio::spawn(service.clone().oneshot(post(Some("taken"), "{}")));
    let (_, late_reply) = handle.next_request().await.unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;

    let successor = tokio::spawn(service.clone().oneshot(post(Some("taken"), "{}")));
    let (_, reply) = handle
        .next_request()
        .await
        .expect("the expired lease freed the key");
    reply.send_response(answer("successor"));
    assert_eq!(
        read(successor.await.unwrap().unwrap()).await.body,
        "successor"
    );

    late_reply.send_response(answer("late"));
    assert_eq!(read(paused.await.unwrap().unwrap()).await.body, "late");
    let retry = send(&service, post(Some("taken"), "{}")).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, "successor", "the newer record stands");
}

#[tokio::test(start_paused = true)]
async fn a_completed_record_is_replayed_until_its_ttl_and_then_runs_again() {
    let upstream = Counting::default();
    let mut day = policy();
    day.ttl = Duration::from_secs(60);
    let service = stack(memory(), day, upstream.service());
    send(&service, post(Some("daily"), "{}")).await;
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert!(send(&service, post(Some("daily"), "{}")).await.replayed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!send(&service, post(Some("daily"), "{}")).await.replayed());
    assert_eq!(upstream.executions(), 2);
}
