//! The inbox cases of the store suite, run against every backend that keeps
//! inbox queues: accept records and queues in one step, claims lease and fence, settlements
//! move deliveries on, dead ones page, revive and go.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use idempotency_core::backend::{
    AttemptFailure, CompletedRecord, Delivery, DeliveryId, FencingToken, InboxQueues, Record,
    RouteName, ScopedKey, StoredBody, StoredRequest,
};
use idempotency_core::{
    backend::{Acceptance, Claim, Fenced, Inbox, Settlement},
    Store,
};

use crate::records::{fp, scoped};

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(3600);

fn queue() -> RouteName {
    RouteName::new("hooks").unwrap()
}

fn hook_key(n: usize) -> ScopedKey {
    scoped("hooks", None, &format!("evt_{n}"))
}

fn inbox(store: &dyn Store) -> &dyn Inbox {
    store.inbox().expect("this backend keeps inbox queues")
}

/// Whole milliseconds, as stores keep times.
fn at(seconds_ago: u64) -> SystemTime {
    let now = idempotency_core::backend::now_millis() - seconds_ago * 1000;
    SystemTime::UNIX_EPOCH + Duration::from_millis(now)
}

fn ack(id: DeliveryId) -> CompletedRecord {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    CompletedRecord {
        fingerprint: fp(1),
        token: FencingToken::generate(),
        created_at: at(0),
        status: StatusCode::ACCEPTED,
        headers,
        body: StoredBody::Kept(Bytes::from(format!("{{\"delivery\":\"{id}\"}}"))),
    }
}

/// The delivery of request `n`, received `seconds_ago`.
fn delivery(n: usize, seconds_ago: u64) -> Delivery {
    let mut headers = HeaderMap::new();
    headers.insert("x-github-event", HeaderValue::from_static("push"));
    headers.append("x-multi", HeaderValue::from_static("a"));
    headers.append("x-multi", HeaderValue::from_static("b"));
    let request = StoredRequest {
        method: Method::POST,
        target: format!("/hooks/github?n={n}"),
        headers,
        body: Bytes::from(format!("{{\"n\":{n}}}")),
    };
    let mut delivery = Delivery::new(hook_key(n), request);
    delivery.received_at = at(seconds_ago);
    delivery.id = DeliveryId::generate(delivery.received_at);
    delivery
}

async fn accept(store: &dyn Store, delivery: &Delivery) -> Acceptance {
    let key = delivery.key.clone();
    let ack = ack(delivery.id);
    inbox(store)
        .accept(&key, &ack, delivery, TTL)
        .await
        .unwrap()
}

async fn claim(store: &dyn Store, now: SystemTime, max: usize) -> Vec<Claim> {
    inbox(store).claim(&queue(), now, max, LEASE).await.unwrap()
}

async fn queues(store: &dyn Store, now: SystemTime) -> InboxQueues {
    inbox(store).queues(&queue(), now).await.unwrap()
}

fn failure(status: u16) -> AttemptFailure {
    AttemptFailure {
        status: Some(StatusCode::from_u16(status).unwrap()),
        error: Some(format!("upstream answered {status}")),
    }
}

async fn settle(store: &dyn Store, claim: &Claim, settlement: Settlement) -> Fenced {
    inbox(store)
        .settle(&queue(), claim, &settlement)
        .await
        .unwrap()
}

pub async fn accept_records_the_ack_and_queues_once(store: Arc<dyn Store>) {
    let first = delivery(1, 0);
    assert_eq!(accept(&*store, &first).await, Acceptance::Queued);
    let Some((Record::Completed(stored), _)) = store.get(&first.key).await.unwrap() else {
        panic!("the acknowledgement is recorded under the key")
    };
    assert_eq!(stored.body, ack(first.id).body);
    assert_eq!(stored.status, StatusCode::ACCEPTED);
    let again = delivery(1, 0);
    match accept(&*store, &again).await {
        Acceptance::Existing(Record::Completed(r)) => assert_eq!(r.body, ack(first.id).body),
        other => panic!("a duplicate finds the first acknowledgement, got {other:?}"),
    }
    let counted = queues(&*store, at(0)).await;
    assert_eq!(
        (counted.pending, counted.in_flight, counted.dead),
        (1, 0, 0)
    );
    let claims = claim(&*store, at(0), 10).await;
    assert_eq!(claims.len(), 1, "queued once");
    assert_eq!(
        claims[0].delivery.request, first.request,
        "the request as it was sent"
    );
    assert_eq!(claims[0].delivery.key, first.key, "with its parsed key");
    assert_eq!(claims[0].delivery.attempts, 1);
}

pub async fn claims_lease_deliveries_until_their_lease_runs_out(store: Arc<dyn Store>) {
    for n in 0..3 {
        accept(&*store, &delivery(n, 5)).await;
    }
    let now = at(0);
    assert_eq!(claim(&*store, now, 2).await.len(), 2);
    let counted = queues(&*store, now).await;
    assert_eq!((counted.pending, counted.in_flight), (1, 2));
    assert_eq!(claim(&*store, now, 10).await.len(), 1);
    assert!(
        claim(&*store, now, 10).await.is_empty(),
        "every one is in flight"
    );
    let later = now + LEASE + Duration::from_secs(1);
    let again = claim(&*store, later, 10).await;
    assert_eq!(
        again.len(),
        3,
        "a dead replica's attempts are retried after the lease"
    );
    assert!(again.iter().all(|c| c.delivery.attempts == 2));
}

pub async fn a_late_settlement_is_fenced_off(store: Arc<dyn Store>) {
    accept(&*store, &delivery(1, 5)).await;
    let now = at(0);
    let first = claim(&*store, now, 1).await.remove(0);
    let second = claim(&*store, now + LEASE + Duration::from_secs(1), 1)
        .await
        .remove(0);
    assert_ne!(first.token, second.token);
    assert_eq!(
        settle(&*store, &first, Settlement::Delivered).await,
        Fenced::LeaseLost
    );
    assert_eq!(
        settle(&*store, &second, Settlement::Delivered).await,
        Fenced::Applied
    );
    assert_eq!(
        settle(&*store, &second, Settlement::Delivered).await,
        Fenced::LeaseLost
    );
    assert_eq!(queues(&*store, now).await, InboxQueues::default());
}

pub async fn a_retry_is_due_again_with_its_failure(store: Arc<dyn Store>) {
    accept(&*store, &delivery(1, 5)).await;
    let now = at(0);
    let first = claim(&*store, now, 1).await.remove(0);
    let due = now + Duration::from_secs(10);
    let retry = Settlement::Retry {
        due,
        failure: failure(500),
    };
    assert_eq!(settle(&*store, &first, retry).await, Fenced::Applied);
    assert!(claim(&*store, now + Duration::from_secs(9), 1)
        .await
        .is_empty());
    let counted = queues(&*store, now).await;
    assert_eq!((counted.pending, counted.in_flight), (1, 0));
    let second = claim(&*store, due, 1).await.remove(0);
    assert_eq!(second.delivery.attempts, 2);
    assert_eq!(
        second.delivery.last_status,
        Some(StatusCode::INTERNAL_SERVER_ERROR)
    );
    assert_eq!(
        second.delivery.last_error.as_deref(),
        Some("upstream answered 500")
    );
    assert_eq!(second.delivery.request, delivery(1, 5).request);
}

/// Three dead deliveries, in id order.
async fn three_dead(store: &dyn Store) -> Vec<DeliveryId> {
    let mut ids = Vec::new();
    for n in 0..3 {
        let d = delivery(n, 30 - n as u64);
        ids.push(d.id);
        accept(store, &d).await;
    }
    for c in claim(store, at(0), 10).await {
        let dead = Settlement::Dead {
            failure: failure(503),
        };
        assert_eq!(settle(store, &c, dead).await, Fenced::Applied);
    }
    ids.sort();
    ids
}

pub async fn dead_deliveries_page_revive_and_go(store: Arc<dyn Store>) {
    let ids = three_dead(&*store).await;
    let inbox = inbox(&*store);
    let counted = queues(&*store, at(0)).await;
    assert_eq!(
        (counted.pending, counted.in_flight, counted.dead),
        (0, 0, 3)
    );
    assert!(
        claim(&*store, at(0) + LEASE * 2, 10).await.is_empty(),
        "dead is never claimed"
    );
    let page = inbox.dead(&queue(), 2, None).await.unwrap();
    assert_eq!(page.iter().map(|d| d.id).collect::<Vec<_>>(), ids[..2]);
    assert_eq!(page[0].last_status, Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(page[0].attempts, 1);
    let rest = inbox.dead(&queue(), 2, Some(ids[1])).await.unwrap();
    assert_eq!(rest.iter().map(|d| d.id).collect::<Vec<_>>(), ids[2..]);
    assert!(inbox.retry_dead(&queue(), ids[0], at(0)).await.unwrap());
    assert!(
        !inbox.retry_dead(&queue(), ids[0], at(0)).await.unwrap(),
        "no longer dead"
    );
    let revived = claim(&*store, at(0), 10).await;
    assert_eq!(revived.len(), 1);
    assert_eq!(revived[0].delivery.id, ids[0]);
    assert_eq!(revived[0].delivery.attempts, 1, "a fresh attempt budget");
    assert!(inbox.remove_dead(&queue(), ids[1]).await.unwrap());
    assert!(!inbox.remove_dead(&queue(), ids[1]).await.unwrap());
    let counted = queues(&*store, at(0)).await;
    assert_eq!((counted.in_flight, counted.dead), (1, 1));
}

pub async fn queues_report_the_oldest_waiting(store: Arc<dyn Store>) {
    accept(&*store, &delivery(1, 90)).await;
    accept(&*store, &delivery(2, 10)).await;
    // Asked a quarter of a second later: the age is kept to the millisecond (the clock may
    // have moved on between the two readings of it).
    let later = at(0) + Duration::from_millis(250);
    let counted = queues(&*store, later).await;
    let waited = counted.oldest_pending.as_millis();
    assert!((90_250..91_250).contains(&waited), "{counted:?}");
    assert_eq!(counted.pending, 2);
    let other = RouteName::new("other").unwrap();
    let elsewhere = inbox(&*store).queues(&other, at(0)).await.unwrap();
    assert_eq!(elsewhere, InboxQueues::default(), "queues are per route");
}

pub async fn concurrent_claims_hand_each_delivery_out_once(store: Arc<dyn Store>) {
    for n in 0..40 {
        accept(&*store, &delivery(n, 5)).await;
    }
    let now = at(0);
    let claimers = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { claim(&*store, now, 7).await })
    });
    let mut seen = HashSet::new();
    for claimer in claimers.collect::<Vec<_>>() {
        for c in claimer.await.unwrap() {
            assert!(seen.insert(c.delivery.id), "handed out twice");
        }
    }
    assert_eq!(seen.len(), 40);
}
