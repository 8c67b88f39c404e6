//! The file store beyond the shared suite: what survives a restart or a crash, how opening fails,
//! and that expired records are purged so the file stops growing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tokio::time::sleep;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use idempotency_proxy::idempotency::fingerprint::Fingerprint;
use idempotency_proxy::idempotency::key::{IdempotencyKey, RouteName, ScopedKey};
use idempotency_proxy::idempotency::record::{CompletedRecord, FencingToken, Record, StoredBody};
use idempotency_proxy::store::{
    self, file::PURGE_INTERVAL, Fenced, FileStore, MemoryStore, Reservation, Store, StoreError,
    StoreSpec,
};

const LONG: Duration = Duration::from_secs(60);

/// A database path unique to one test, removed (with anything redb left) when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(test: &str) -> Self {
        let name = format!("idempotency-proxy-file-{}-{test}.redb", std::process::id());
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        Self(path)
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn key(name: &str) -> ScopedKey {
    let route = RouteName::new("payments").unwrap();
    ScopedKey::new(route, None, IdempotencyKey::new(name).unwrap())
}

fn fp() -> Fingerprint {
    Fingerprint::from_bytes([9; 32])
}

fn outcome(token: FencingToken, body: Bytes) -> CompletedRecord {
    let mut headers = HeaderMap::new();
    headers.append(
        "content-type",
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.append("x-multi", HeaderValue::from_static("a"));
    headers.append("x-multi", HeaderValue::from_static("b"));
    CompletedRecord {
        fingerprint: fp(),
        token,
        created_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        status: StatusCode::CREATED,
        headers,
        body: StoredBody::Kept(body),
    }
}

/// 1 MiB of arbitrary bytes, so any truncation or re-encoding shows.
fn big_body() -> Bytes {
    (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

async fn acquire(store: &dyn Store, key: &ScopedKey, lease: Duration) -> FencingToken {
    match store.reserve(key, fp(), lease).await.unwrap() {
        Reservation::Acquired(token) => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

async fn in_flight_token(store: &dyn Store, key: &ScopedKey) -> Option<FencingToken> {
    match store.get(key).await.unwrap() {
        Some((Record::InFlight(r), _)) => Some(r.token),
        None => None,
        other => panic!("expected an in-flight record, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_closing_and_reopening() {
    let path = TempPath::new("reopen");
    let store = FileStore::open(&path.0).unwrap();
    let held = acquire(&store, &key("held"), LONG).await;
    let token = acquire(&store, &key("done"), LONG).await;
    let done = outcome(token, big_body());
    let applied = store.complete(&key("done"), &done, LONG).await.unwrap();
    assert_eq!(applied, Fenced::Applied);
    drop(store);

    // Reopened the way the proxy opens it, from its spec.
    let store = store::open(&StoreSpec::File(path.0.clone())).await.unwrap();
    assert_eq!(in_flight_token(&*store, &key("held")).await, Some(held));
    let (record, left) = store.get(&key("done")).await.unwrap().unwrap();
    assert_eq!(record, Record::Completed(done));
    assert!(left > LONG - Duration::from_secs(10), "{left:?} left");
    // The reopened store still fences: the old holder can finish, a stranger cannot.
    let stranger = FencingToken::generate();
    assert_eq!(
        store.release(&key("held"), stranger).await.unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(
        store.release(&key("held"), held).await.unwrap(),
        Fenced::Applied
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reserves_of_different_keys_all_succeed_and_are_durable() {
    let path = TempPath::new("concurrent");
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&path.0).unwrap());
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let key = key(&format!("k{i}"));
                (key.clone(), acquire(&*store, &key, LONG).await)
            })
        })
        .collect();
    let mut acquired = Vec::new();
    for task in tasks {
        acquired.push(task.await.unwrap());
    }
    drop(store);

    let store = FileStore::open(&path.0).unwrap();
    assert_eq!(store.stored_records().await.unwrap(), 200);
    for (key, token) in &acquired {
        assert_eq!(in_flight_token(&store, key).await, Some(*token));
    }
}

fn open_error(path: &Path) -> String {
    match FileStore::open(path) {
        Err(StoreError::Open(message)) => message,
        other => panic!("expected StoreError::Open, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_database_does_not_open() {
    let path = TempPath::new("not-a-db");
    std::fs::write(&path.0, "store = \"memory\"\n".repeat(400)).unwrap();
    let message = open_error(&path.0);
    assert!(message.contains(&*path.0.to_string_lossy()), "{message}");
    assert!(message.contains("not a store file"), "{message}");
    // Nothing was written over it.
    assert_eq!(std::fs::read(&path.0).unwrap().len(), 17 * 400);
}

#[test]
fn a_file_already_in_use_does_not_open_twice() {
    let path = TempPath::new("locked");
    let first = FileStore::open(&path.0).unwrap();
    let message = open_error(&path.0);
    assert!(message.contains(&*path.0.to_string_lossy()), "{message}");
    assert!(message.contains("already open"), "{message}");
    drop(first);
    FileStore::open(&path.0).unwrap();
}

#[test]
fn missing_directories_are_created() {
    let dir = TempPath::new("dir");
    let path = dir.0.join("nested").join("store.redb");
    FileStore::open(&path).unwrap();
    assert!(path.is_file());
    std::fs::remove_dir_all(&dir.0).unwrap();
}

/// Reserves and completes `count` keys from 32 tasks, each outcome with a `body` of that many bytes and `ttl`.
async fn load(store: &Arc<FileStore>, round: &str, count: usize, body: usize, ttl: Duration) {
    let tasks: Vec<_> = (0..32)
        .map(|task| {
            let store = store.clone();
            let round = round.to_owned();
            tokio::spawn(async move {
                for i in (task..count).step_by(32) {
                    let key = key(&format!("{round}-{i}"));
                    let token = acquire(&*store, &key, LONG).await;
                    let done = outcome(token, Bytes::from(vec![i as u8; body]));
                    store.complete(&key, &done, ttl).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_records_are_purged_and_the_file_stops_growing() {
    let path = TempPath::new("purge");
    let store = Arc::new(FileStore::open(&path.0).unwrap());
    let ttl = Duration::from_millis(200);
    let (count, body) = (1000, 4096);
    let mut sizes = Vec::new();
    for round in ["a", "b", "c", "d", "e"] {
        load(&store, round, count, body, ttl).await;
        assert!(store.stored_records().await.unwrap() > 0);
        // Idle past the ttl and a purge interval: the writer sweeps on its own.
        sleep(ttl + PURGE_INTERVAL * 2).await;
        assert_eq!(store.stored_records().await.unwrap(), 0, "round {round}");
        assert!(store
            .get(&key(&format!("{round}-7")))
            .await
            .unwrap()
            .is_none());
        sizes.push(std::fs::metadata(&path.0).unwrap().len());
    }
    // Freed pages are reused, so the file stays near one round's worth of data (it wanders a
    // little with how the batches fell); without purging, five rounds would need 20 MiB.
    eprintln!("file sizes after each round: {sizes:?}");
    let one_round = (count * body) as u64;
    assert!(
        sizes.iter().all(|size| *size <= 3 * one_round),
        "the file kept growing: {sizes:?}"
    );
}
