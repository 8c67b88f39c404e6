//! The in-process store: for tests and trials. Everything is lost on restart.
//!
//! Expiry uses tokio's clock, so tests can pause time and step over a lease or a TTL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Fenced, Reservation, Store, StoreError};
use crate::idempotency::fingerprint::Fingerprint;
use crate::idempotency::key::ScopedKey;
use crate::idempotency::record::{CompletedRecord, FencingToken, InFlightRecord, Record};

#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    records: HashMap<String, (Record, Instant)>,
    /// When the earliest entry written since the last sweep expires: sweeping before then
    /// would scan every entry and find nothing to drop.
    next_sweep: Option<Instant>,
}

impl Entries {
    /// The live record under `key`; an expired one is dropped on the way.
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut (Record, Instant)> {
        if self
            .records
            .get(key)
            .is_some_and(|(_, expires)| *expires <= now)
        {
            self.records.remove(key);
        }
        self.records.get_mut(key)
    }

    fn held_by(
        &mut self,
        key: &str,
        token: FencingToken,
        now: Instant,
    ) -> Option<&mut (Record, Instant)> {
        self.live(key, now)
            .filter(|(record, _)| matches!(record, Record::InFlight(r) if r.token == token))
    }

    /// Inserts, first sweeping out expired entries when one may be due, so a store under
    /// steady load stays bounded without scanning on every write.
    fn insert(&mut self, key: String, record: Record, expires: Instant) {
        let now = Instant::now();
        if self.next_sweep.is_some_and(|due| due <= now) {
            let mut earliest: Option<Instant> = None;
            self.records.retain(|_, (_, at)| {
                let live = *at > now;
                if live {
                    earliest = Some(earliest.map_or(*at, |e| e.min(*at)));
                }
                live
            });
            self.next_sweep = earliest;
        }
        self.next_sweep = Some(self.next_sweep.map_or(expires, |due| due.min(expires)));
        self.records.insert(key, (record, expires));
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock cannot leave a half-written entry: every change is a
        // single insert or remove, so the map stays valid and we keep serving.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let storage_key = key.storage_key();
        let now = Instant::now();
        let mut entries = self.entries();
        if let Some((record, _)) = entries.live(&storage_key, now) {
            return Ok(record.clone().into());
        }
        let (token, record) = InFlightRecord::fresh(fingerprint);
        entries.insert(storage_key, record, now + lease);
        Ok(Reservation::Acquired(token))
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        let now = Instant::now();
        let mut entries = self.entries();
        let held = entries.held_by(&key.storage_key(), token, now);
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
        let record = Record::Completed(record.clone());
        let now = Instant::now();
        let mut entries = self.entries();
        let held = entries.held_by(&key.storage_key(), token, now);
        let done = held.map(|entry| *entry = (record, now + ttl)).is_some();
        Ok(applied(done))
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        let storage_key = key.storage_key();
        let mut entries = self.entries();
        let held = entries
            .held_by(&storage_key, token, Instant::now())
            .is_some();
        if held {
            entries.records.remove(&storage_key);
        }
        Ok(applied(held))
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let now = Instant::now();
        let mut entries = self.entries();
        let live = entries.live(&key.storage_key(), now);
        Ok(live.map(|(record, expires)| (record.clone(), *expires - now)))
    }

    async fn remove(&self, key: &ScopedKey) -> Result<bool, StoreError> {
        let storage_key = key.storage_key();
        let mut entries = self.entries();
        let existed = entries.live(&storage_key, Instant::now()).is_some();
        entries.records.remove(&storage_key);
        Ok(existed)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::key::{IdempotencyKey, RouteName};

    fn key(n: usize) -> ScopedKey {
        let key = IdempotencyKey::new(format!("k{n}")).unwrap();
        ScopedKey::new(RouteName::new("r").unwrap(), None, key)
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_once_one_is_due() {
        let store = MemoryStore::new();
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        for n in 0..100 {
            store
                .reserve(&key(n), fingerprint, Duration::from_secs(1))
                .await
                .unwrap();
        }
        store
            .reserve(&key(100), fingerprint, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(store.entries().records.len(), 101, "nothing is due yet");
        tokio::time::advance(Duration::from_secs(2)).await;
        store
            .reserve(&key(101), fingerprint, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            store.entries().records.len(),
            2,
            "the expired hundred are gone"
        );
        assert_eq!(
            store.entries().next_sweep,
            Some(Instant::now() + Duration::from_secs(58))
        );
    }
}
