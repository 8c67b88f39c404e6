//! What the Redis store's inbox queues leave in Redis itself, and what the store makes of a
//! stored delivery it cannot decode. The cases every backend shares are in the store suite.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method};
use idempotency_core::backend::{Delivery, FencingToken, RouteName, StoredRequest};
use idempotency_core::{
    backend::{Acceptance, Fenced, Removal, Removed, Settlement},
    Store,
};
use idempotency_redis_store::RedisStore;
use idempotency_test_support::records::{outcome, scoped, small_body};
use redis::aio::MultiplexedConnection;

const TTL: Duration = Duration::from_secs(60);
const LEASE: Duration = Duration::from_secs(30);

fn route() -> RouteName {
    RouteName::new("hooks").unwrap()
}

fn delivery(n: usize) -> Delivery {
    let request = StoredRequest {
        method: Method::POST,
        target: "/hooks/x".into(),
        headers: HeaderMap::new(),
        body: Bytes::from(format!("{{\"n\":{n}}}")),
    };
    Delivery::new(scoped("hooks", None, &format!("evt_{n}")), request)
}

async fn accept(store: &RedisStore, delivery: &Delivery) {
    let ack = outcome(FencingToken::generate(), small_body());
    let inbox = store.inbox().unwrap();
    let accepted = inbox.accept(&delivery.key, &ack, delivery, TTL).await;
    assert_eq!(accepted.unwrap(), Acceptance::Queued);
}

async fn keys(conn: &mut MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(conn)
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_delivered_request_leaves_only_its_acknowledgement() {
    let Some((store, prefix)) =
        idempotency_test_support::redis::store_with_prefix("inbox-layout").await
    else {
        return;
    };
    let mut conn = idempotency_test_support::redis::connection().await.unwrap();
    let first = delivery(1);
    accept(&store, &first).await;
    let queue = format!("{prefix}inbox:{{hooks:0}}:");
    let record = format!("{prefix}{}", first.key.storage_key());
    let expected = ["arrived", "deliveries", "due"].map(|k| format!("{queue}{k}"));
    let mut expected = expected.to_vec();
    expected.push(record.clone());
    expected.sort();
    assert_eq!(keys(&mut conn, &prefix).await, expected);
    let inbox = store.inbox().unwrap();
    let claim = inbox.claim(&route(), SystemTime::now(), 10, LEASE).await;
    let claim = claim.unwrap().remove(0);
    let settled = inbox.settle(&route(), &claim, &Settlement::Delivered).await;
    assert_eq!(settled.unwrap(), Fenced::Applied);
    assert_eq!(keys(&mut conn, &prefix).await, [record]);
}

#[tokio::test]
async fn a_delivery_that_cannot_be_decoded_is_made_dead_not_handed_out() {
    let Some((store, prefix)) =
        idempotency_test_support::redis::store_with_prefix("inbox-corrupt").await
    else {
        return;
    };
    let mut conn = idempotency_test_support::redis::connection().await.unwrap();
    let (good, bad) = (delivery(1), delivery(2));
    accept(&store, &good).await;
    accept(&store, &bad).await;
    let hash = format!("{prefix}inbox:{{hooks:0}}:deliveries");
    let _: () = redis::cmd("HSET")
        .arg(&hash)
        .arg(bad.id.to_string())
        .arg(&b"\x01not a delivery"[..])
        .query_async(&mut conn)
        .await
        .unwrap();
    let inbox = store.inbox().unwrap();
    let claims = inbox.claim(&route(), SystemTime::now(), 10, LEASE).await;
    let claims = claims.unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].delivery.id, good.id);
    let counted = inbox.queues(&route(), SystemTime::now()).await.unwrap();
    assert_eq!((counted.in_flight, counted.dead), (1, 1));
    // Listing leaves it out rather than failing; an operator can still delete it by id.
    assert!(inbox.dead(&route(), 10, None).await.unwrap().is_empty());
    assert!(inbox.remove_dead(&route(), bad.id).await.unwrap());
}

#[tokio::test]
async fn an_inbox_record_named_in_its_shards_slot_is_found_and_removed_by_its_key() {
    let Some((store, prefix)) =
        idempotency_test_support::redis::store_with_prefix("inbox-tagged").await
    else {
        return;
    };
    let store = store.with_inbox_shards(4);
    let mut conn = idempotency_test_support::redis::connection().await.unwrap();
    let first = delivery(1);
    accept(&store, &first).await;
    let tagged: Vec<String> = keys(&mut conn, &prefix)
        .await
        .into_iter()
        .filter(|k| k.starts_with(&format!("{prefix}{{hooks:")))
        .collect();
    assert_eq!(tagged.len(), 1, "the record, named with its shard's tag");
    assert!(tagged[0].ends_with(":-:evt_1"), "{tagged:?}");
    assert!(store.get(&first.key).await.unwrap().is_some());
    let removed = store.remove(&first.key, Removal::CompletedOnly).await;
    assert_eq!(removed.unwrap(), Removed::Removed);
    assert!(store.get(&first.key).await.unwrap().is_none());
}
