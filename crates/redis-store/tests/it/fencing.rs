//! Which commands the Redis store's fenced writes go out as: Valkey's own `SET ... IFEQ` and
//! `DELIFEQ` where the server has them, the scripts on Redis 7, learned from one refusal. Each
//! server here is a private one, so its `INFO commandstats` counts this test's commands only.

use std::collections::HashMap;
use std::time::Duration;

use idempotency_core::backend::{CompletedRecord, Record};
use idempotency_core::{backend::Fenced, Store};
use idempotency_redis_store::{FenceCommand, FenceCommands, RedisStore};
use idempotency_test_support::poll;
use idempotency_test_support::records::{acquire, key, outcome, small_body};
use idempotency_test_support::redis::connection_to;
use idempotency_test_support::redis_server::{RedisServer, Server};
use redis::aio::MultiplexedConnection;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(150);

const NOTHING_LEARNED: FenceCommands = FenceCommands {
    write: None,
    release: None,
};

/// `INFO commandstats` as command name to its `calls` and `failed_calls`.
async fn command_stats(conn: &mut MultiplexedConnection) -> HashMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let field = |fields: &str, name: &str| {
        let found = fields.split(',').find_map(|f| f.strip_prefix(name));
        found.map_or(0, |n| n.parse().unwrap())
    };
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_")?.split_once(':'))
        .map(|(name, fields)| {
            let counts = (field(fields, "calls="), field(fields, "failed_calls="));
            (name.to_owned(), counts)
        })
        .collect()
}

/// Waits until the key named `name` is gone from the server, as a lease running out removes it.
async fn until_expired(conn: &mut MultiplexedConnection, name: &str) {
    let gone = async || {
        let exists: bool = redis::cmd("EXISTS")
            .arg(name)
            .query_async(&mut *conn)
            .await
            .unwrap();
        !exists
    };
    poll::until(Duration::from_secs(30), format!("{name} expired"), gone).await;
}

/// One of each fenced write, each answered `Applied`: a holder renews and completes
/// `{name}-done`, another releases `{name}-freed`. Answers the completed record.
async fn renew_complete_release(store: &dyn Store, name: &str) -> CompletedRecord {
    let (done, freed) = (key(&format!("{name}-done")), key(&format!("{name}-freed")));
    let holder = acquire(store, &done, LONG).await;
    let renewed = store.renew(&done, holder, LONG).await.unwrap();
    assert_eq!(renewed, Fenced::Applied);
    let completed = outcome(holder, small_body());
    let stored = store.complete(&done, &completed, LONG).await.unwrap();
    assert_eq!(stored, Fenced::Applied);
    let holder = acquire(store, &freed, LONG).await;
    assert_eq!(
        store.release(&freed, holder).await.unwrap(),
        Fenced::Applied
    );
    completed
}

/// A holder renews, completes and releases; another, whose lease ran out and whose key was
/// reserved again, is fenced off: each by Valkey's own commands, never a script.
#[tokio::test]
async fn valkey_fences_with_its_own_commands() {
    let Some(valkey) = RedisServer::start_on(Server::Valkey).await else {
        return;
    };
    let store = RedisStore::connect(&valkey.url(), "fence:").await.unwrap();
    let mut conn = connection_to(&valkey.url()).await;
    assert_eq!(store.fence_commands(), NOTHING_LEARNED);

    let completed = renew_complete_release(&store, "one").await;
    let retaken = key("retaken");
    let late = acquire(&store, &retaken, SHORT).await;
    until_expired(&mut conn, &format!("fence:{}", retaken.storage_key())).await;
    let current = acquire(&store, &retaken, LONG).await;
    let overwrite = outcome(late, small_body());
    let lost = store.complete(&retaken, &overwrite, LONG).await.unwrap();
    assert_eq!(lost, Fenced::LeaseLost);

    let stats = command_stats(&mut conn).await;
    let scripts: Vec<_> = stats.keys().filter(|c| c.starts_with("eval")).collect();
    assert!(scripts.is_empty(), "scripts ran: {scripts:?}");
    // Four reservations, one renewal and two completions; one release.
    assert_eq!(stats.get("set"), Some(&(7, 0)), "{stats:?}");
    assert_eq!(stats.get("delifeq"), Some(&(1, 0)), "{stats:?}");
    let native = FenceCommands {
        write: Some(FenceCommand::SetIfEq),
        release: Some(FenceCommand::DelIfEq),
    };
    assert_eq!(store.fence_commands(), native);

    // What the fenced-off holder met is untouched, expiry included.
    let (record, left) = store.get(&retaken).await.unwrap().unwrap();
    assert!(matches!(record, Record::InFlight(r) if r.token == current));
    assert!(left > LONG / 2 && left <= LONG, "{left:?} left");
    let (record, _) = store.get(&key("one-done")).await.unwrap().unwrap();
    assert_eq!(record, Record::Completed(completed));
}

/// Redis 7 has neither `SET ... IFEQ` nor `DELIFEQ` nor `DELEX`: the store learns that from
/// the first refusals and runs the scripts from then on, without asking again.
#[tokio::test]
async fn redis_7_fences_with_scripts_once_it_refused_the_native_commands() {
    let Some(redis) = RedisServer::start_on(Server::Redis).await else {
        return;
    };
    let mut conn = connection_to(&redis.url()).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap();
    if !version.starts_with("7.") || info.contains("valkey_version") {
        let why = format!("redis-server on PATH is {version}, not a Redis 7");
        return Server::Redis.skip(&why).unwrap_or(());
    }
    let store = RedisStore::connect(&redis.url(), "fence:").await.unwrap();
    for round in ["first", "second"] {
        renew_complete_release(&store, round).await;
    }

    let scripts = FenceCommands {
        write: Some(FenceCommand::Script),
        release: Some(FenceCommand::Script),
    };
    assert_eq!(store.fence_commands(), scripts);
    let stats = command_stats(&mut conn).await;
    // One `SET ... IFEQ`, refused; the scripts' own commands count here too.
    let (_, refused) = stats["set"];
    assert_eq!(refused, 1, "{stats:?}");
    // Two renewals, two completions, two releases: by hash, or by source where the server
    // did not know the script yet (`NOSCRIPT`).
    let (by_hash, unknown) = stats.get("evalsha").copied().unwrap_or_default();
    let (by_source, _) = stats.get("eval").copied().unwrap_or_default();
    assert_eq!(by_hash - unknown + by_source, 6, "{stats:?}");
}

/// On a Valkey cluster each fenced write goes to the master of its key's slot, natively.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valkey_cluster_fences_with_its_own_commands() {
    let shared = || idempotency_test_support::redis_cluster::shared_on(Server::Valkey);
    let Some(cluster) = tokio::task::block_in_place(shared) else {
        return;
    };
    let prefix = idempotency_test_support::redis::unique_prefix("cluster-fence");
    let store = RedisStore::connect_cluster(&cluster.seeds(), &prefix)
        .await
        .unwrap();
    for n in 0..8 {
        renew_complete_release(&store, &format!("key-{n}")).await;
    }
    let native = FenceCommands {
        write: Some(FenceCommand::SetIfEq),
        release: Some(FenceCommand::DelIfEq),
    };
    assert_eq!(store.fence_commands(), native);
}
