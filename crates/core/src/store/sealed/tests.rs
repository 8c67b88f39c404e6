//! The sealed store over the memory store: what the inner store holds, rotation, and records
//! that must not open.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::keys::test_key;
use super::*;
use crate::model::{ClientScope, IdempotencyKey, RouteName};
use crate::store::MemoryStore;

const LEASE: Duration = Duration::from_secs(30);

fn scoped(key: &str) -> ScopedKey {
    let scope = Some(ClientScope::from_secret(b"Bearer a"));
    let route = RouteName::new("payments").unwrap();
    ScopedKey::new(route, scope, IdempotencyKey::new(key).unwrap())
}

fn sealed(inner: &Arc<MemoryStore>, current: u8, old: &[u8]) -> SealedStore<MemoryStore> {
    let old = old.iter().map(|b| test_key(*b)).collect();
    SealedStore::new(inner.clone(), SealingKeys::new(test_key(current), old))
}

/// Reserves `key` and completes it with a recognisable answer.
async fn write(store: &dyn Store, key: &ScopedKey, body: &'static str) -> CompletedRecord {
    let fingerprint = Fingerprint::from_bytes([3; 32]);
    let Reservation::Acquired(token) = store.reserve(key, fingerprint, LEASE).await.unwrap() else {
        panic!("the key was taken");
    };
    let mut headers = HeaderMap::new();
    headers.append("x-secret-header", HeaderValue::from_static("hidden-value"));
    let record = CompletedRecord {
        fingerprint,
        token,
        created_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_000),
        status: StatusCode::CREATED,
        headers,
        body: StoredBody::Kept(Bytes::from_static(body.as_bytes())),
    };
    let ttl = Duration::from_secs(60);
    assert_eq!(
        store.complete(key, &record, ttl).await.unwrap(),
        Fenced::Applied
    );
    record
}

async fn read(store: &dyn Store, key: &ScopedKey) -> Result<Option<Record>, StoreError> {
    Ok(store.get(key).await?.map(|(record, _)| record))
}

#[tokio::test]
async fn the_inner_store_holds_neither_the_answer_nor_the_raw_key() {
    let inner = Arc::new(MemoryStore::new());
    let store = sealed(&inner, 1, &[]);
    let key = scoped("order-4711");
    let record = write(&store, &key, "card 4242 charged").await;

    assert!(read(inner.as_ref(), &key).await.unwrap().is_none());
    let Some(Record::Completed(envelope)) =
        read(inner.as_ref(), &key.with_hashed_key()).await.unwrap()
    else {
        panic!("no envelope under the hashed name");
    };
    let encoded = Record::Completed(envelope).encode();
    for needle in [&b"card 4242"[..], b"hidden-value", b"x-secret-header"] {
        assert!(!encoded.windows(needle.len()).any(|w| w == needle));
    }
    assert!(!key.with_hashed_key().storage_key().contains("order-4711"));
    let replay = store
        .reserve(&key, record.fingerprint, LEASE)
        .await
        .unwrap();
    assert_eq!(replay, Reservation::Completed(record.clone()));
    assert_eq!(
        read(&store, &key).await.unwrap(),
        Some(Record::Completed(record))
    );
}

#[tokio::test]
async fn each_record_gets_a_fresh_nonce() {
    let inner = Arc::new(MemoryStore::new());
    let store = sealed(&inner, 1, &[]);
    let (a, b) = (scoped("a"), scoped("b"));
    write(&store, &a, "same").await;
    write(&store, &b, "same").await;
    let body = |record: Option<Record>| match record {
        Some(Record::Completed(r)) => r.body,
        other => panic!("{other:?}"),
    };
    let first = body(read(inner.as_ref(), &a.with_hashed_key()).await.unwrap());
    let second = body(read(inner.as_ref(), &b.with_hashed_key()).await.unwrap());
    assert_ne!(first, second);
}

#[tokio::test]
async fn old_keys_open_what_they_sealed_and_no_key_is_corrupt() {
    let inner = Arc::new(MemoryStore::new());
    let key = scoped("rotated");
    let record = write(&sealed(&inner, 1, &[]), &key, "before rotation").await;

    let rotated = sealed(&inner, 2, &[1]);
    let opened = read(&rotated, &key).await.unwrap();
    assert_eq!(opened, Some(Record::Completed(record)));

    let forgotten = sealed(&inner, 2, &[3]);
    let err = read(&forgotten, &key).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let fingerprint = Fingerprint::from_bytes([3; 32]);
    let err = forgotten
        .reserve(&key, fingerprint, LEASE)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
}

#[tokio::test]
async fn a_record_moved_under_another_key_does_not_open() {
    let inner = Arc::new(MemoryStore::new());
    let store = sealed(&inner, 1, &[]);
    let (victim, thief) = (scoped("victim"), scoped("thief"));
    write(&store, &victim, "victim's answer").await;
    let Some(Record::Completed(envelope)) = read(inner.as_ref(), &victim.with_hashed_key())
        .await
        .unwrap()
    else {
        panic!("no envelope");
    };
    // The envelope as it would be copied byte for byte (token included) under the thief's
    // name: only the associated data tells the two apart.
    let victim_name = victim.with_hashed_key().storage_key().to_owned();
    assert!(store.open(&victim_name, &envelope).is_ok());
    let thief_name = thief.with_hashed_key().storage_key().to_owned();
    let err = store.open(&thief_name, &envelope).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
}

#[tokio::test]
async fn an_unsealed_record_is_corrupt_never_replayed() {
    let inner = Arc::new(MemoryStore::new());
    let store = sealed(&inner, 1, &[]);
    let key = scoped("plain");
    write(inner.as_ref(), &key.with_hashed_key(), "written in clear").await;
    let err = read(&store, &key).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
}
