//! The store suite over Redis: one server (natively and by script), the sharded inbox layout a
//! cluster uses, encryption at rest over it, a private Redis Cluster, and the same store on a
//! private Valkey and Valkey cluster, where fenced writes are the server's own commands
//! (`tests/fencing.rs` shows which). The cases need a
//! Redis (`REDIS_URL`, default 127.0.0.1:6379) and, for the cluster, `redis-server` and
//! `redis-cli`; without them they report `SKIPPED` unless `REQUIRE_REDIS=1`; the Valkey cases need
//! `VALKEY_SERVER` (`.ci/fetch-valkey`), else `SKIPPED` unless `REQUIRE_VALKEY=1`.

use std::sync::Arc;

use idempotency_core::{backend::SealedStore, Store};
use idempotency_redis_store::RedisStore;
use idempotency_test_support::records::sealing_keys;
use idempotency_test_support::redis as test_redis;
use idempotency_test_support::redis_server::Server;
use idempotency_test_support::{inbox_suite, redis_cluster, store_suite};

type Backend = Option<Arc<dyn Store>>;

async fn redis(test: &str) -> Backend {
    Some(Arc::new(test_redis::store(test).await?))
}

/// The Redis store reserving with its script, as it does on Redis before 7.0.
async fn redis_script(test: &str) -> Backend {
    let store = test_redis::store(test).await?;
    Some(Arc::new(store.reserving_by_script()))
}

/// The Redis store with its inbox queues split into shards and its inbox records named in
/// their shard's slot, as on a cluster: the cluster layout's logic, on one Redis.
async fn redis_sharded(test: &str) -> Backend {
    let store = test_redis::store(test).await?;
    Some(Arc::new(store.with_inbox_shards(4)))
}

/// Encryption at rest over the sharded Redis layout: sealed deliveries, records under hashed
/// keys, named in their shard's slot.
async fn sealed_redis(test: &str) -> Backend {
    let store = test_redis::store(test).await?.with_inbox_shards(4);
    Some(Arc::new(SealedStore::new(
        Arc::new(store),
        sealing_keys(test),
    )))
}

/// The Redis store on the test binary's private Valkey, which takes `SET ... IFEQ` and
/// `DELIFEQ`.
async fn valkey(test: &str) -> Backend {
    let (store, _) = test_redis::store_on(Server::Valkey, test).await?;
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
    let cluster = tokio::task::block_in_place(|| redis_cluster::shared_on(server))?;
    let prefix = test_redis::unique_prefix(test);
    let store = RedisStore::connect_cluster(&cluster.seeds(), &prefix)
        .await
        .unwrap_or_else(|e| panic!("the test cluster is up but the store cannot connect: {e}"));
    Some(Arc::new(store))
}

store_suite!(redis);
store_suite!(redis_script);
store_suite!(cluster);
store_suite!(valkey);
store_suite!(valkey_cluster);

inbox_suite!(redis_inbox => redis);
inbox_suite!(redis_script_inbox => redis_script);
inbox_suite!(redis_sharded_inbox => redis_sharded);
inbox_suite!(sealed_redis_inbox => sealed_redis);
inbox_suite!(cluster_inbox => cluster);
inbox_suite!(valkey_inbox => valkey);
inbox_suite!(valkey_cluster_inbox => valkey_cluster);
