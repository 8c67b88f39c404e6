//! Store throughput: reserve+complete pairs on distinct keys from many tasks at once, the file
//! store (a log of segments with an index in memory, one sync shared by every completion in a
//! stretch of the log) next to the memory store; then the CPU time per pair (the process's user and system time from
//! `/proc/self/stat`, over `CPU_ROUNDS` rounds), which the throughput alone does not show.
//!
//! `cargo bench --bench stores`

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::{HeaderMap, StatusCode};
use idempotency_core::backend::{
    CompletedRecord, Fingerprint, IdempotencyKey, RouteName, ScopedKey, StoredBody,
};
use idempotency_proxy::store::{FileStore, MemoryStore, Reservation, Store};
use tokio::runtime::Runtime;

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

/// A store and the name its figures are reported under.
type NamedStore = (&'static str, Arc<dyn Store>);

/// Removes a file store's file and its log folder.
fn remove_store(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let mut log = path.as_os_str().to_owned();
    log.push("-log");
    let _ = std::fs::remove_dir_all(log);
}

/// A runtime of 2 threads, and a fresh file store (in a file named after `name`) and memory
/// store to run on it; the file's path, to remove afterwards.
fn runtime_and_stores(name: &str) -> (Runtime, PathBuf, [NamedStore; 2]) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let path = std::env::temp_dir().join(format!(
        "idempotency-proxy-{name}-{}.redb",
        std::process::id()
    ));
    remove_store(&path);
    let file: Arc<dyn Store> = Arc::new(FileStore::open(&path).unwrap());
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    (runtime, path, [("file", file), ("memory", memory)])
}

fn reserve_complete_pairs(c: &mut Criterion) {
    let (runtime, path, stores) = runtime_and_stores("bench");
    let mut group = c.benchmark_group("reserve_complete_pairs");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(PAIRS as u64));
    let round = AtomicUsize::new(0);
    for (name, store) in stores {
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
    remove_store(&path);
}

/// Rounds of `PAIRS` pairs per store for the CPU figure: enough for a few hundred clock ticks.
const CPU_ROUNDS: usize = 10;

/// The process's user and system time so far, from `/proc/self/stat` (in clock ticks, 10 ms).
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |n: usize| {
        fields
            .get(n)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are the 14th and 15th fields, the 12th and 13th after the name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

fn cpu_per_pair(_: &mut Criterion) {
    let (runtime, path, stores) = runtime_and_stores("bench-cpu");
    for (name, store) in stores {
        let (cpu, started) = (cpu_time(), Instant::now());
        runtime.block_on(async {
            for round in 0..CPU_ROUNDS {
                pairs(store.clone(), 1_000_000 + round).await;
            }
        });
        let (cpu, wall) = (cpu_time().saturating_sub(cpu), started.elapsed());
        let count = (CPU_ROUNDS * PAIRS) as f64;
        println!(
            "cpu_per_pair/{name}: {:.0} pairs/s, {:.1} µs CPU per pair ({} pairs)",
            count / wall.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / count,
            CPU_ROUNDS * PAIRS,
        );
    }
    remove_store(&path);
}

criterion_group!(benches, reserve_complete_pairs, cpu_per_pair);
criterion_main!(benches);
