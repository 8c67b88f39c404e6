//! Store throughput: reserve+complete pairs on distinct keys from many tasks at once, the file
//! store (group commit: one fsync per batch of writes) next to the memory store.
//!
//! `cargo bench --bench stores`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::{HeaderMap, StatusCode};
use idempotency_core::model::{
    CompletedRecord, Fingerprint, IdempotencyKey, RouteName, ScopedKey, StoredBody,
};
use idempotency_proxy::store::{FileStore, MemoryStore, Reservation, Store};

const PAIRS: usize = 2000;
const TASKS: usize = 64;
const LONG: Duration = Duration::from_secs(60);

/// `PAIRS` reserve+complete pairs from `TASKS` tasks, on keys no earlier round used.
async fn pairs(store: Arc<dyn Store>, round: usize) {
    let workers: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in (task..PAIRS).step_by(TASKS) {
                    pair(&*store, &format!("{round}-{i}")).await;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
}

async fn pair(store: &dyn Store, name: &str) {
    let key = ScopedKey::new(
        RouteName::new("bench").unwrap(),
        None,
        IdempotencyKey::new(name).unwrap(),
    );
    let fingerprint = Fingerprint::from_bytes([1; 32]);
    let Reservation::Acquired(token) = store.reserve(&key, fingerprint, LONG).await.unwrap() else {
        panic!("a fresh key is acquired");
    };
    let record = CompletedRecord {
        fingerprint,
        token,
        created_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        status: StatusCode::CREATED,
        headers: HeaderMap::new(),
        body: StoredBody::Kept(Bytes::from_static(b"{\"id\":\"ch_1\"}")),
    };
    store.complete(&key, &record, LONG).await.unwrap();
}

fn reserve_complete_pairs(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let path = std::env::temp_dir().join(format!(
        "idempotency-proxy-bench-{}.redb",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let file: Arc<dyn Store> = Arc::new(FileStore::open(&path).unwrap());
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut group = c.benchmark_group("reserve_complete_pairs");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(PAIRS as u64));
    let round = AtomicUsize::new(0);
    for (name, store) in [("file", file), ("memory", memory)] {
        group.bench_function(name, |b| {
            b.to_async(&runtime).iter_custom(|iters| {
                let store = store.clone();
                let first = round.fetch_add(iters as usize, Ordering::Relaxed);
                async move {
                    let started = Instant::now();
                    for n in 0..iters as usize {
                        pairs(store.clone(), first + n).await;
                    }
                    started.elapsed()
                }
            });
        });
    }
    group.finish();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, reserve_complete_pairs);
criterion_main!(benches);
