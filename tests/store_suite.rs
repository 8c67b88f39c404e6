//! One suite of store cases, run against every backend.
//!
//! `store_suite!` turns each case below into a test per backend, so a backend that behaves
//! differently from the others fails by name. The Redis cases need a Redis (see
//! `common/redis.rs`), the cluster cases `redis-server` and `redis-cli` to start a private
//! cluster (`common/redis_cluster.rs`); without them they report `SKIPPED` unless
//! `REQUIRE_REDIS=1`. The Valkey cases run the same store on a private Valkey and a private
//! Valkey cluster (`VALKEY_SERVER`; `SKIPPED` without one unless `REQUIRE_VALKEY=1`), where the
//! fenced writes are the server's own commands instead of scripts (`store_suite/fencing.rs`).

mod common;
#[path = "store_suite/fencing.rs"]
mod fencing;
#[path = "store_suite/inbox.rs"]
mod inbox_cases;

use inbox_cases::*;

use std::sync::Arc;
use std::time::Duration;

use common::records::{self, acquire, big_body, fp, outcome, scoped, small_body};
use common::redis_server::Server;
use common::temp::TempPath;
use http::StatusCode;
use idempotency_proxy::model::{FencingToken, Record, ScopedKey, StoredBody};
use idempotency_proxy::store::{
    CachingStore, Fenced, FileStore, MemoryStore, RedisStore, Removal, Removed, ReplayCache,
    Reservation, SealedStore, SealingKey, SealingKeys, Store, StoreError, StoreSpec,
};
use idempotency_proxy::Secret;
use tokio::time::sleep;

type Backend = Option<Arc<dyn Store>>;

async fn memory(_test: &str) -> Backend {
    Some(Arc::new(MemoryStore::new()))
}

/// A fresh database file per test, so cases never see each other's records. The path is unlinked
/// once open: the store keeps its handle, and nothing is left behind in the temp directory.
async fn file(test: &str) -> Backend {
    let path = TempPath::new(&format!("{test}.redb"));
    Some(Arc::new(FileStore::open(path.path()).unwrap()))
}

/// Encryption at rest over the memory store: every case holds through sealing and opening.
async fn sealed(test: &str) -> Backend {
    let path = TempPath::new(&format!("{test}.key"));
    std::fs::write(path.path(), "07".repeat(32)).unwrap();
    let secret = Secret::resolve(&format!("file:{}", path.path().display())).unwrap();
    let keys = SealingKeys::new(SealingKey::from_secret(&secret).unwrap(), Vec::new());
    Some(Arc::new(SealedStore::new(
        Arc::new(MemoryStore::new()),
        keys,
    )))
}

/// The replay cache in front of the memory store, serving copies for longer than any case runs:
/// every case must hold with copies answered from memory too.
async fn cached(_test: &str) -> Backend {
    let cache = Arc::new(ReplayCache::new(1 << 24));
    let inner = Arc::new(MemoryStore::new());
    let store = CachingStore::new(inner, cache, Duration::from_secs(60), LONG);
    Some(Arc::new(store))
}

async fn redis(test: &str) -> Backend {
    Some(Arc::new(common::redis::store(test).await?))
}

/// The Redis store reserving with its script, as it does on Redis before 7.0.
async fn redis_script(test: &str) -> Backend {
    let store = common::redis::store(test).await?;
    Some(Arc::new(store.reserving_by_script()))
}

/// The Redis store with its inbox queues split into shards and its inbox records named in
/// their shard's slot, as on a cluster: the cluster layout's logic, on one Redis.
async fn redis_sharded(test: &str) -> Backend {
    let store = common::redis::store(test).await?;
    Some(Arc::new(store.with_inbox_shards(4)))
}

/// Encryption at rest over the sharded Redis layout: sealed deliveries, records under hashed
/// keys, named in their shard's slot.
async fn sealed_redis(test: &str) -> Backend {
    let store = common::redis::store(test).await?.with_inbox_shards(4);
    let path = TempPath::new(&format!("{test}.key"));
    std::fs::write(path.path(), "07".repeat(32)).unwrap();
    let secret = Secret::resolve(&format!("file:{}", path.path().display())).unwrap();
    let keys = SealingKeys::new(SealingKey::from_secret(&secret).unwrap(), Vec::new());
    Some(Arc::new(SealedStore::new(Arc::new(store), keys)))
}

/// The Redis store on the test binary's private Valkey, which takes `SET ... IFEQ` and
/// `DELIFEQ`.
async fn valkey(test: &str) -> Backend {
    let (store, _) = common::redis::store_on(Server::Valkey, test).await?;
    Some(Arc::new(store))
}

/// A store on the test binary's private Redis Cluster, under a prefix of its own.
async fn cluster(test: &str) -> Backend {
    cluster_of(Server::Redis, test).await
}

/// A store on the test binary's private Valkey cluster, under a prefix of its own.
async fn valkey_cluster(test: &str) -> Backend {
    cluster_of(Server::Valkey, test).await
}

async fn cluster_of(server: Server, test: &str) -> Backend {
    // Starting the cluster blocks for a few seconds, once; the runtime is multi-threaded.
    let cluster = tokio::task::block_in_place(|| common::redis_cluster::shared_on(server))?;
    let prefix = common::redis::unique_prefix(test);
    let store = RedisStore::connect_cluster(&cluster.seeds(), &prefix)
        .await
        .unwrap_or_else(|e| panic!("the test cluster is up but the store cannot connect: {e}"));
    Some(Arc::new(store))
}

macro_rules! store_suite {
    ($backend:ident) => {
        store_suite!(@cases $backend, [
            fresh_reserve_acquires,
            second_reserve_sees_the_holder,
            completion_is_replayed_byte_for_byte,
            strangers_are_fenced_off,
            release_by_the_holder_frees_the_key,
            an_expired_lease_frees_the_key_and_fences_the_old_holder,
            renew_keeps_a_short_lease_alive,
            a_completed_record_expires_after_its_ttl,
            get_reports_the_time_left,
            remove_deletes_and_reports_whether_it_existed,
            removing_an_in_flight_record_needs_force,
            scoped_keys_never_collide,
            concurrent_reserves_admit_exactly_one,
        ]);
    };
    (@cases $backend:ident, [$($case:ident),* $(,)?]) => {
        store_suite!(@named $backend, $backend, [$($case),*]);
    };
    (@named $module:ident, $backend:ident, [$($case:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let test = concat!(stringify!($backend), "-", stringify!($case));
                    if let Some(store) = super::$backend(test).await {
                        super::$case(store).await;
                    }
                }
            )*
        }
    };
}

/// The inbox cases (`store_suite/inbox.rs`), in a module of their own per backend.
macro_rules! inbox_suite {
    ($module:ident => $backend:ident) => {
        store_suite!(@named $module, $backend, [
            accept_records_the_ack_and_queues_once,
            claims_lease_deliveries_until_their_lease_runs_out,
            a_late_settlement_is_fenced_off,
            a_retry_is_due_again_with_its_failure,
            dead_deliveries_page_revive_and_go,
            queues_report_the_oldest_waiting,
            concurrent_claims_hand_each_delivery_out_once,
        ]);
    };
}

store_suite!(memory);
store_suite!(file);
store_suite!(sealed);
store_suite!(cached);
store_suite!(redis);
store_suite!(redis_script);
store_suite!(cluster);
store_suite!(valkey);
store_suite!(valkey_cluster);

inbox_suite!(memory_inbox => memory);
inbox_suite!(file_inbox => file);
inbox_suite!(sealed_inbox => sealed);
inbox_suite!(cached_inbox => cached);
inbox_suite!(redis_inbox => redis);
inbox_suite!(redis_script_inbox => redis_script);
inbox_suite!(redis_sharded_inbox => redis_sharded);
inbox_suite!(sealed_redis_inbox => sealed_redis);
inbox_suite!(cluster_inbox => cluster);
inbox_suite!(valkey_inbox => valkey);
inbox_suite!(valkey_cluster_inbox => valkey_cluster);

const LONG: Duration = Duration::from_secs(30);

fn key() -> ScopedKey {
    records::key("order-1")
}

async fn record(store: &dyn Store, key: &ScopedKey) -> Option<Record> {
    store.get(key).await.unwrap().map(|(record, _)| record)
}

fn in_flight_token(record: Option<Record>) -> FencingToken {
    match record {
        Some(Record::InFlight(r)) => r.token,
        other => panic!("expected an in-flight record, got {other:?}"),
    }
}

async fn fresh_reserve_acquires(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    match record(&*store, &key()).await {
        Some(Record::InFlight(r)) => {
            assert_eq!(r.token, token);
            assert_eq!(r.fingerprint, fp(1));
        }
        other => panic!("expected the new in-flight record, got {other:?}"),
    }
}

async fn second_reserve_sees_the_holder(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    match store.reserve(&key(), fp(2), LONG).await.unwrap() {
        Reservation::InFlight(r) => {
            assert_eq!(r.token, token);
            assert_eq!(
                r.fingerprint,
                fp(1),
                "the holder's fingerprint, not the caller's"
            );
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
}

async fn completion_is_replayed_byte_for_byte(store: Arc<dyn Store>) {
    for (name, body) in [("small", small_body()), ("big", big_body())] {
        let key = scoped("payments", None, name);
        let token = acquire(&*store, &key, LONG).await;
        let done = outcome(token, body.clone());
        assert_eq!(
            store.complete(&key, &done, LONG).await.unwrap(),
            Fenced::Applied
        );
        let Reservation::Completed(replay) = store.reserve(&key, fp(1), LONG).await.unwrap() else {
            panic!("expected Completed for the {name} body");
        };
        assert_eq!(replay.status, StatusCode::CREATED);
        let multi: Vec<_> = replay.headers.get_all("x-multi").iter().collect();
        assert_eq!(multi, ["first", "second"]);
        assert_eq!(replay.body, StoredBody::Kept(body), "{name} body differs");
        assert_eq!(replay, done);
    }
}

async fn strangers_are_fenced_off(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    let stranger = FencingToken::generate();
    let before = record(&*store, &key()).await;
    let lost = Fenced::LeaseLost;
    assert_eq!(
        store
            .complete(&key(), &outcome(stranger, small_body()), LONG)
            .await
            .unwrap(),
        lost
    );
    assert_eq!(store.renew(&key(), stranger, LONG).await.unwrap(), lost);
    assert_eq!(store.release(&key(), stranger).await.unwrap(), lost);
    assert_eq!(
        record(&*store, &key()).await,
        before,
        "a stranger changed the record"
    );

    // Once completed, nobody holds the key any more: not even the old holder can touch it.
    let done = outcome(token, small_body());
    assert_eq!(
        store.complete(&key(), &done, LONG).await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        store
            .complete(&key(), &outcome(token, big_body()), LONG)
            .await
            .unwrap(),
        lost
    );
    assert_eq!(store.renew(&key(), token, LONG).await.unwrap(), lost);
    assert_eq!(store.release(&key(), token).await.unwrap(), lost);
    assert_eq!(record(&*store, &key()).await, Some(Record::Completed(done)));
}

async fn release_by_the_holder_frees_the_key(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    assert_eq!(store.release(&key(), token).await.unwrap(), Fenced::Applied);
    assert_eq!(record(&*store, &key()).await, None);
    let next = acquire(&*store, &key(), LONG).await;
    assert_ne!(next, token);
}

async fn an_expired_lease_frees_the_key_and_fences_the_old_holder(store: Arc<dyn Store>) {
    let old = acquire(&*store, &key(), Duration::from_millis(150)).await;
    sleep(Duration::from_millis(400)).await;
    let new = acquire(&*store, &key(), LONG).await;
    let late = outcome(old, small_body());
    assert_eq!(
        store.complete(&key(), &late, LONG).await.unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(
        store.renew(&key(), old, LONG).await.unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(store.release(&key(), old).await.unwrap(), Fenced::LeaseLost);
    assert_eq!(in_flight_token(record(&*store, &key()).await), new);
}

async fn renew_keeps_a_short_lease_alive(store: Arc<dyn Store>) {
    let lease = Duration::from_millis(400);
    let token = acquire(&*store, &key(), lease).await;
    for _ in 0..6 {
        sleep(Duration::from_millis(100)).await;
        assert_eq!(
            store.renew(&key(), token, lease).await.unwrap(),
            Fenced::Applied
        );
    }
    // 600ms have passed: without the renewals the lease would have run out.
    assert_eq!(in_flight_token(record(&*store, &key()).await), token);
    sleep(Duration::from_millis(900)).await;
    assert_ne!(acquire(&*store, &key(), LONG).await, token);
}

async fn a_completed_record_expires_after_its_ttl(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    let ttl = Duration::from_millis(300);
    assert_eq!(
        store
            .complete(&key(), &outcome(token, small_body()), ttl)
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert!(matches!(
        record(&*store, &key()).await,
        Some(Record::Completed(_))
    ));
    sleep(Duration::from_millis(700)).await;
    assert_eq!(record(&*store, &key()).await, None);
    acquire(&*store, &key(), LONG).await;
}

async fn get_reports_the_time_left(store: Arc<dyn Store>) {
    assert!(store.get(&key()).await.unwrap().is_none());
    let lease = Duration::from_secs(10);
    let token = acquire(&*store, &key(), lease).await;
    let (_, left) = store.get(&key()).await.unwrap().unwrap();
    assert!(
        left > Duration::ZERO && left <= lease,
        "{left:?} left of a {lease:?} lease"
    );
    let ttl = Duration::from_secs(60);
    store
        .complete(&key(), &outcome(token, small_body()), ttl)
        .await
        .unwrap();
    let (_, left) = store.get(&key()).await.unwrap().unwrap();
    assert!(
        left > lease && left <= ttl,
        "{left:?} left of a {ttl:?} ttl"
    );
}

async fn remove_deletes_and_reports_whether_it_existed(store: Arc<dyn Store>) {
    let remove = |removal| {
        let store = store.clone();
        async move { store.remove(&key(), removal).await.unwrap() }
    };
    assert_eq!(remove(Removal::CompletedOnly).await, Removed::Missing);
    let token = acquire(&*store, &key(), LONG).await;
    assert_eq!(remove(Removal::Forced).await, Removed::Removed);
    assert_eq!(record(&*store, &key()).await, None);
    assert_eq!(remove(Removal::Forced).await, Removed::Missing);
    // The holder of a removed reservation has lost it.
    let done = outcome(token, small_body());
    assert_eq!(
        store.complete(&key(), &done, LONG).await.unwrap(),
        Fenced::LeaseLost
    );

    let token = acquire(&*store, &key(), LONG).await;
    store
        .complete(&key(), &outcome(token, small_body()), LONG)
        .await
        .unwrap();
    assert_eq!(remove(Removal::CompletedOnly).await, Removed::Removed);
    acquire(&*store, &key(), LONG).await;
}

async fn removing_an_in_flight_record_needs_force(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    assert_eq!(
        store.remove(&key(), Removal::CompletedOnly).await.unwrap(),
        Removed::KeptInFlight
    );
    // Kept as it was: its holder still completes it, and a retry replays that outcome.
    let done = outcome(token, small_body());
    assert_eq!(
        store.complete(&key(), &done, LONG).await.unwrap(),
        Fenced::Applied
    );
    let retry = store.reserve(&key(), fp(1), LONG).await.unwrap();
    assert!(matches!(retry, Reservation::Completed(_)), "{retry:?}");
}

async fn scoped_keys_never_collide(store: Arc<dyn Store>) {
    let keys = [
        scoped("payments", None, "k:1"),
        scoped("refunds", None, "k:1"),
        scoped("payments", Some(b"Bearer alice"), "k:1"),
        scoped("payments", Some(b"Bearer bob"), "k:1"),
        scoped("payments", None, "-:k:1"),
        scoped("payments", None, "k"),
    ];
    let mut tokens = Vec::new();
    for key in &keys {
        tokens.push(acquire(&*store, key, LONG).await);
    }
    let done = outcome(tokens[0], small_body());
    assert_eq!(
        store.complete(&keys[0], &done, LONG).await.unwrap(),
        Fenced::Applied
    );
    for (key, token) in keys.iter().zip(&tokens).skip(1) {
        assert_eq!(in_flight_token(record(&*store, key).await), *token);
    }
}

async fn concurrent_reserves_admit_exactly_one(store: Arc<dyn Store>) {
    let start = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (store, start) = (store.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                store.reserve(&key(), fp(1), LONG).await.unwrap()
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut seen = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Reservation::Acquired(token) => winners.push(token),
            Reservation::InFlight(r) => seen.push(r.token),
            other @ Reservation::Completed(_) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "{} reservations acquired one key",
        winners.len()
    );
    assert!(
        seen.iter().all(|t| *t == winners[0]),
        "a loser saw another holder"
    );
}

// Redis only: what the store leaves in Redis itself, and what it makes of values it did not
// write.

/// The record's key in Redis, as the store names it.
fn redis_key(prefix: &str, key: &ScopedKey) -> String {
    format!("{prefix}{}", key.storage_key())
}

async fn pttl(conn: &mut ::redis::aio::MultiplexedConnection, key: &str) -> i64 {
    ::redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn redis_keeps_one_key_per_record_under_the_prefix_with_its_expiry() {
    keeps_one_key_per_record_under_the_prefix_with_its_expiry(Server::Redis).await;
}

/// On Valkey the completion is `SET ... IFEQ ... PX`: the record must keep an expiry there too.
#[tokio::test]
async fn valkey_keeps_one_key_per_record_under_the_prefix_with_its_expiry() {
    keeps_one_key_per_record_under_the_prefix_with_its_expiry(Server::Valkey).await;
}

async fn keeps_one_key_per_record_under_the_prefix_with_its_expiry(server: Server) {
    let Some((store, prefix)) = common::redis::store_on(server, "layout").await else {
        return;
    };
    let url = common::redis::shared_url(server).await.unwrap();
    let mut conn = common::redis::connection_to(&url).await;
    let name = redis_key(&prefix, &key());
    let token = acquire(&store, &key(), Duration::from_secs(10)).await;
    let left = pttl(&mut conn, &name).await;
    assert!(left > 0 && left <= 10_000, "in-flight PTTL {left}");
    let done = outcome(token, small_body());
    store.complete(&key(), &done, LONG).await.unwrap();
    let left = pttl(&mut conn, &name).await;
    assert!(left > 10_000 && left <= 30_000, "completed PTTL {left}");
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys, [name]);
}

#[tokio::test]
async fn redis_reports_a_corrupt_value_instead_of_panicking() {
    reports_a_corrupt_value_instead_of_panicking(Server::Redis).await;
}

#[tokio::test]
async fn valkey_reports_a_corrupt_value_instead_of_panicking() {
    reports_a_corrupt_value_instead_of_panicking(Server::Valkey).await;
}

async fn reports_a_corrupt_value_instead_of_panicking(server: Server) {
    let Some((store, prefix)) = common::redis::store_on(server, "corrupt").await else {
        return;
    };
    let url = common::redis::shared_url(server).await.unwrap();
    let mut conn = common::redis::connection_to(&url).await;
    let name = redis_key(&prefix, &key());
    let garbage: &[u8] = b"\x01\x01not a record";
    let _: () = ::redis::cmd("SET")
        .arg(&name)
        .arg(garbage)
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let reserved = store.reserve(&key(), fp(1), LONG).await;
    assert!(
        matches!(reserved, Err(StoreError::Corrupt(_))),
        "{reserved:?}"
    );
    let got = store.get(&key()).await;
    assert!(matches!(got, Err(StoreError::Corrupt(_))), "{got:?}");
    // A fenced write finds no holder's prefix there and leaves the value alone.
    let stranger = FencingToken::generate();
    assert_eq!(
        store.renew(&key(), stranger, LONG).await.unwrap(),
        Fenced::LeaseLost
    );
    let still: Vec<u8> = ::redis::cmd("GET")
        .arg(&name)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(still, garbage);
}

#[tokio::test]
async fn redis_connect_failures_do_not_reveal_the_password() {
    let refused = RedisStore::connect("redis://proxy:s3cret-pw@127.0.0.1:1/0", "x:").await;
    match refused {
        Err(StoreError::Unavailable(message)) => {
            assert!(!message.contains("s3cret-pw"), "{message}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let invalid = RedisStore::connect("redis://proxy:s3cret-pw@host:notaport", "x:").await;
    match invalid {
        Err(StoreError::Open(message)) => assert!(!message.contains("s3cret-pw"), "{message}"),
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test]
async fn redis_operations_time_out_when_redis_hangs() {
    let Some(relay) = common::redis::Relay::start().await else {
        return;
    };
    let prefix = common::redis::unique_prefix("hang");
    let op_timeout = Duration::from_millis(300);
    let store = RedisStore::connect(&relay.url, &prefix)
        .await
        .unwrap()
        .with_op_timeout(op_timeout);
    store.ping().await.unwrap();
    relay.freeze();
    let started = tokio::time::Instant::now();
    let reserved = store.reserve(&key(), fp(1), LONG).await;
    assert!(
        matches!(reserved, Err(StoreError::Timeout(t)) if t == op_timeout),
        "{reserved:?}"
    );
    let pinged = store.ping().await;
    assert!(matches!(pinged, Err(StoreError::Timeout(_))), "{pinged:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn redis_urls_open_a_redis_store() {
    if common::redis::connection().await.is_none() {
        return;
    }
    let spec: StoreSpec = common::redis::url().parse().unwrap();
    let store = idempotency_proxy::store::open(&spec).await.unwrap();
    store.ping().await.unwrap();
    assert!(format!("{store:?}").contains(idempotency_proxy::store::redis::DEFAULT_PREFIX));
}
