//! The in-process store: for tests and trials. Everything is lost on restart.
//!
//! The maps records are filed in are in `entries.rs`; inbox routes' queues live beside
//! the records (`queues.rs`).
//!
//! Expiry uses tokio's clock, so tests can pause time and step over a lease or a TTL.

mod entries;
mod queues;

use std::hash::RandomState;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::time::Instant;

use crate::model::{
    CompletedRecord, Delivery, DeliveryId, FencingToken, Fingerprint, InFlightRecord, InboxQueues,
    Record, RouteName, ScopedKey,
};
use crate::store::api::{Fenced, Removal, Removed, Reservation, Store, StoreError};
use crate::store::digest_key::DigestKey;
use crate::store::inbox::{Acceptance, Claim, Inbox, Settlement};
use entries::{shard, Entries, SHARDS};
use queues::MemoryQueues;

/// Records in this process's memory, lost when it exits.
///
/// ```
/// use std::time::Duration;
/// use idempotency_core::backend::{Fingerprint, IdempotencyKey, RouteName, ScopedKey};
/// use idempotency_core::{MemoryStore, Store, backend::Reservation};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = MemoryStore::new();
/// let key = ScopedKey::new(
///     RouteName::new("payments").unwrap(),
///     None,
///     IdempotencyKey::new("order-1").unwrap(),
/// );
/// let request = Fingerprint::from_bytes([7; 32]);
/// let lease = Duration::from_secs(30);
/// let first = store.reserve(&key, request, lease).await.unwrap();
/// assert!(matches!(first, Reservation::Acquired(_)));
/// let retry = store.reserve(&key, request, lease).await.unwrap();
/// assert!(matches!(retry, Reservation::InFlight(_)));
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Entries>]>,
    hasher: RandomState,
    /// Inbox routes' queues (`queues.rs`).
    queues: MemoryQueues,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            queues: MemoryQueues::default(),
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `key`'s record is filed, and its map, locked.
    fn entries(&self, key: &ScopedKey) -> (DigestKey, std::sync::MutexGuard<'_, Entries>) {
        let at = DigestKey::new(&self.hasher, *key.name_digest());
        // A panic while holding the lock cannot leave a half-written entry: every change is a
        // single insert or remove, so the map stays valid and we keep serving.
        let entries = self.shards[shard(&at)]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (at, entries)
    }
}

fn applied(done: bool) -> Fenced {
    if done {
        Fenced::Applied
    } else {
        Fenced::LeaseLost
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        let now = Instant::now();
        let (at, mut entries) = self.entries(key);
        if let Some((record, _)) = entries.live(&at, now) {
            return Ok(Record::decode(record.clone())?.into());
        }
        let (token, record) = InFlightRecord::fresh(fingerprint);
        entries.insert(at, record.encode(), now + lease);
        Ok(Reservation::Acquired(token))
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        let now = Instant::now();
        let (at, mut entries) = self.entries(key);
        let held = entries.held_by(&at, token, now);
        let done = held.map(|(_, expires)| *expires = now + lease).is_some();
        Ok(applied(done))
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let token = record.token;
        let record = record.encode();
        let now = Instant::now();
        let (at, mut entries) = self.entries(key);
        let held = entries.held_by(&at, token, now);
        let done = held.map(|entry| *entry = (record, now + ttl)).is_some();
        Ok(applied(done))
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        let (at, mut entries) = self.entries(key);
        let held = entries.held_by(&at, token, Instant::now()).is_some();
        if held {
            entries.remove(&at);
        }
        Ok(applied(held))
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let now = Instant::now();
        let (at, mut entries) = self.entries(key);
        let Some((record, expires)) = entries.live(&at, now) else {
            return Ok(None);
        };
        Ok(Some((Record::decode(record.clone())?, *expires - now)))
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        let (at, mut entries) = self.entries(key);
        let found = entries.live(&at, Instant::now());
        let answer = match found {
            None => Removed::Missing,
            Some((record, _))
                if removal == Removal::CompletedOnly && Record::encoded_in_flight(record) =>
            {
                return Ok(Removed::KeptInFlight)
            }
            Some(_) => Removed::Removed,
        };
        entries.remove(&at);
        Ok(answer)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        Some(self)
    }
}

#[async_trait]
impl Inbox for MemoryStore {
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError> {
        let now = Instant::now();
        // The shard stays locked while the delivery is queued: record and delivery appear
        // together or not at all.
        let (at, mut entries) = self.entries(key);
        if let Some((record, _)) = entries.live(&at, now) {
            return Ok(Acceptance::Existing(Record::decode(record.clone())?));
        }
        self.queues.push(key.route(), delivery.clone());
        entries.insert(at, ack.encode(), now + ttl);
        Ok(Acceptance::Queued)
    }

    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        Ok(self.queues.claim(queue, now, max, lease))
    }

    async fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        Ok(self.queues.settle(queue, claim, settlement))
    }

    async fn queues(&self, queue: &RouteName, now: SystemTime) -> Result<InboxQueues, StoreError> {
        Ok(self.queues.queues(queue, now))
    }

    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        Ok(self.queues.dead(queue, limit, after))
    }

    async fn retry_dead(
        &self,
        queue: &RouteName,
        id: DeliveryId,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        Ok(self.queues.retry_dead(queue, id, now))
    }

    async fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> Result<bool, StoreError> {
        Ok(self.queues.remove_dead(queue, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{IdempotencyKey, RouteName};

    fn key(n: usize) -> ScopedKey {
        let key = IdempotencyKey::new(format!("k{n}")).unwrap();
        ScopedKey::new(RouteName::new("r").unwrap(), None, key)
    }

    #[tokio::test]
    async fn keys_in_different_shards_stay_apart() {
        let store = MemoryStore::new();
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        for n in 0..4 * SHARDS {
            let reserved = store
                .reserve(&key(n), fingerprint, Duration::from_secs(60))
                .await
                .unwrap();
            assert!(matches!(reserved, Reservation::Acquired(_)));
        }
        let spread = store
            .shards
            .iter()
            .filter(|s| !s.lock().unwrap().is_empty())
            .count();
        assert!(
            spread > SHARDS / 2,
            "keys spread over the shards ({spread} of {SHARDS} used)"
        );
        for n in 0..4 * SHARDS {
            assert!(store.get(&key(n)).await.unwrap().is_some());
        }
    }
}
