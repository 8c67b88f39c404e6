//! One suite of store cases, run against every backend and decorator.
//!
//! [`store_suite!`](crate::store_suite) turns each case below into a test per backend, so a
//! backend that behaves differently from the others fails by name; [`inbox_suite!`](crate::inbox_suite)
//! does the same with the inbox cases (`inbox.rs`). Each store crate runs them over its own
//! backends in its `tests/it/suite.rs`: the memory store and the decorators in the core, the file
//! store, and Redis (one server, by script, sharded, sealed, and a private cluster) in theirs.

// Each case's name says what it checks, and the cases are only ever called by the macros.
#![allow(missing_docs)]

mod inbox;

pub use inbox::*;

use std::sync::Arc;
use std::time::Duration;

use crate::records::{self, acquire, big_body, fp, outcome, scoped, small_body};
use http::StatusCode;
use idempotency_core::backend::{FencingToken, Record, ScopedKey, StoredBody};
use idempotency_core::{
    backend::{Fenced, Removal, Removed, Reservation},
    Store,
};
use tokio::time::sleep;

/// A lease or ttl longer than any case runs.
pub const LONG: Duration = Duration::from_secs(30);

/// The key most cases use.
pub fn key() -> ScopedKey {
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

pub async fn fresh_reserve_acquires(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    match record(&*store, &key()).await {
        Some(Record::InFlight(r)) => {
            assert_eq!(r.token, token);
            assert_eq!(r.fingerprint, fp(1));
        }
        other => panic!("expected the new in-flight record, got {other:?}"),
    }
}

pub async fn second_reserve_sees_the_holder(store: Arc<dyn Store>) {
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

pub async fn completion_is_replayed_byte_for_byte(store: Arc<dyn Store>) {
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

pub async fn strangers_are_fenced_off(store: Arc<dyn Store>) {
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

pub async fn release_by_the_holder_frees_the_key(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    assert_eq!(store.release(&key(), token).await.unwrap(), Fenced::Applied);
    assert_eq!(record(&*store, &key()).await, None);
    let next = acquire(&*store, &key(), LONG).await;
    assert_ne!(next, token);
}

pub async fn an_expired_lease_frees_the_key_and_fences_the_old_holder(store: Arc<dyn Store>) {
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

pub async fn renew_keeps_a_short_lease_alive(store: Arc<dyn Store>) {
    // Renewed four times a lease: a loaded machine may be late by most of a lease between
    // two renewals and the lease still holds.
    let lease = Duration::from_secs(2);
    let started = tokio::time::Instant::now();
    let token = acquire(&*store, &key(), lease).await;
    for _ in 0..6 {
        sleep(lease / 4).await;
        assert_eq!(
            store.renew(&key(), token, lease).await.unwrap(),
            Fenced::Applied
        );
    }
    // Without the renewals the lease would have run out by now.
    assert!(started.elapsed() > lease);
    assert_eq!(in_flight_token(record(&*store, &key()).await), token);
    sleep(lease + Duration::from_millis(500)).await;
    assert_ne!(acquire(&*store, &key(), LONG).await, token);
}

pub async fn a_completed_record_expires_after_its_ttl(store: Arc<dyn Store>) {
    let token = acquire(&*store, &key(), LONG).await;
    // Long enough that a loaded machine still reads the record back before it expires.
    let ttl = Duration::from_secs(2);
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
    sleep(ttl + Duration::from_millis(500)).await;
    assert_eq!(record(&*store, &key()).await, None);
    acquire(&*store, &key(), LONG).await;
}

pub async fn get_reports_the_time_left(store: Arc<dyn Store>) {
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

pub async fn remove_deletes_and_reports_whether_it_existed(store: Arc<dyn Store>) {
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

pub async fn removing_an_in_flight_record_needs_force(store: Arc<dyn Store>) {
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

pub async fn scoped_keys_never_collide(store: Arc<dyn Store>) {
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

pub async fn concurrent_reserves_admit_exactly_one(store: Arc<dyn Store>) {
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
