//! What the Redis store leaves in Redis (and Valkey) itself, what it makes of values it did not
//! write, and how it fails: a password never in a message, a hung Redis a time-out.

use std::time::Duration;

use idempotency_core::backend::{FencingToken, ScopedKey};
use idempotency_core::proxy::ErrorChain;
use idempotency_core::{backend::Fenced, Store, StoreError};
use idempotency_redis_store::RedisStore;
use idempotency_test_support::records::{acquire, fp, outcome, small_body};
use idempotency_test_support::redis;
use idempotency_test_support::redis_server::Server;
use idempotency_test_support::suite::{key, LONG};

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
    let Some((store, prefix)) = redis::store_on(server, "layout").await else {
        return;
    };
    let url = redis::shared_url(server).await.unwrap();
    let mut conn = redis::connection_to(&url).await;
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
    let Some((store, prefix)) = redis::store_on(server, "corrupt").await else {
        return;
    };
    let url = redis::shared_url(server).await.unwrap();
    let mut conn = redis::connection_to(&url).await;
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
        Err(e @ StoreError::Unavailable { .. }) => {
            let message = ErrorChain(&e).to_string();
            assert!(!message.contains("s3cret-pw"), "{message}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let invalid = RedisStore::connect("redis://proxy:s3cret-pw@host:notaport", "x:").await;
    match invalid {
        Err(e @ StoreError::Open { .. }) => {
            let message = ErrorChain(&e).to_string();
            assert!(!message.contains("s3cret-pw"), "{message}");
        }
        other => panic!("expected Open, got {other:?}"),
    }
}

#[tokio::test]
async fn redis_operations_time_out_when_redis_hangs() {
    let Some(relay) = redis::Relay::start().await else {
        return;
    };
    let prefix = redis::unique_prefix("hang");
    let op_timeout = Duration::from_millis(300);
    let store = RedisStore::connect(&relay.url, &prefix)
        .await
        .unwrap()
        .with_op_timeout(op_timeout);
    store.ping().await.unwrap();
    relay.freeze();
    // The error names the operation's own time-out, so it is what ended the wait; the outer
    // bound only keeps a hang from stalling the suite (a loaded machine may be slow to answer,
    // so the test does not time the answer).
    let hung = Duration::from_secs(60);
    let reserved = tokio::time::timeout(hung, store.reserve(&key(), fp(1), LONG)).await;
    assert!(
        matches!(reserved, Ok(Err(StoreError::Timeout(t))) if t == op_timeout),
        "{reserved:?}"
    );
    let pinged = tokio::time::timeout(hung, store.ping()).await;
    assert!(
        matches!(pinged, Ok(Err(StoreError::Timeout(_)))),
        "{pinged:?}"
    );
}
