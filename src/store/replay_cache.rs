//! The bounded map behind [`CachingStore`](super::CachingStore): completed records by the
//! SHA-256 of their store name, each fresh until a fixed instant, the whole bounded by the bytes
//! it holds.
//!
//! The digest rather than the name: it is made once per request anyway (for the log line), and
//! a fixed-width key lives in the map and the order queue without an allocation each.
//!
//! An entry's freshness is set once, when it is stored: serving it does not extend it, so a
//! record dropped on another replica is never answered here for longer than the time it was
//! given. Oldest entries leave first when the budget is full.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::model::CompletedRecord;

/// What an entry costs besides its body and header bytes: the map slot, the record
/// and its header map's own allocations: an estimate, on the generous side.
const ENTRY_OVERHEAD: usize = 1024;
/// Bodies larger than this are not cached: they would push out many small ones.
const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// Completed records kept in memory for a short while, within a byte budget.
#[derive(Debug)]
pub struct ReplayCache {
    budget: usize,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    /// Each entry with its freshness and the insertion number that `order` names it by.
    map: HashMap<NameDigest, (CompletedRecord, Instant, u64)>,
    /// Insertion order; a pair whose number no longer matches the map's entry is stale.
    order: VecDeque<(u64, NameDigest)>,
    bytes: usize,
    inserted: u64,
}

/// The SHA-256 of a record's store name ([`ScopedKey::name_digest`](crate::model::ScopedKey::name_digest)).
type NameDigest = [u8; 32];

fn size(record: &CompletedRecord) -> usize {
    record.payload_len() + ENTRY_OVERHEAD
}

impl ReplayCache {
    /// A cache holding at most `budget` bytes of records.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            inner: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Every change leaves map, order and count consistent before the lock is released.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached record under `key`, if it is still fresh.
    pub fn get(&self, key: &NameDigest) -> Option<CompletedRecord> {
        let mut entries = self.entries();
        match entries.map.get(key) {
            Some((record, fresh_until, _)) if *fresh_until > Instant::now() => Some(record.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `record` for `ttl` at most, and never past `record_left`, the time its record has
    /// left in the store.
    pub fn insert(
        &self,
        key: NameDigest,
        record: &CompletedRecord,
        ttl: Duration,
        record_left: Duration,
    ) {
        let ttl = ttl.min(record_left);
        let bytes = size(record);
        if ttl.is_zero() || bytes > MAX_ENTRY_BYTES.min(self.budget) {
            return;
        }
        let mut entries = self.entries();
        entries.remove(&key);
        while entries.bytes + bytes > self.budget {
            let Some((number, oldest)) = entries.order.pop_front() else {
                break;
            };
            if entries
                .map
                .get(&oldest)
                .is_some_and(|entry| entry.2 == number)
            {
                entries.remove(&oldest);
            }
        }
        entries.inserted += 1;
        let number = entries.inserted;
        entries.bytes += bytes;
        entries.order.push_back((number, key));
        entries
            .map
            .insert(key, (record.clone(), Instant::now() + ttl, number));
        entries.compact();
    }

    /// Forgets `key` (an operator dropped the record).
    pub fn invalidate(&self, key: &NameDigest) {
        self.entries().remove(key);
    }
}

impl Entries {
    fn remove(&mut self, key: &NameDigest) {
        if let Some((record, _, _)) = self.map.remove(key) {
            self.bytes -= size(&record);
        }
    }

    /// Drops stale names from `order` once they outnumber the live ones, so it stays bounded.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(number, key)| map.get(key).is_some_and(|entry| entry.2 == *number));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    use crate::model::{FencingToken, Fingerprint, StoredBody};
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use sha2::{Digest, Sha256};

    fn record(body_len: usize) -> CompletedRecord {
        CompletedRecord {
            fingerprint: Fingerprint::from_bytes([1; 32]),
            token: FencingToken::from_u64(1),
            created_at: SystemTime::now(),
            status: StatusCode::CREATED,
            headers: HeaderMap::new(),
            body: StoredBody::Kept(Bytes::from(vec![0; body_len])),
        }
    }

    fn name(name: &str) -> NameDigest {
        Sha256::digest(name.as_bytes()).into()
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_the_local_ttl() {
        let cache = ReplayCache::new(1 << 20);
        cache.insert(name("k"), &record(10), Duration::from_secs(1), DAY);
        assert!(cache.get(&name("k")).is_some());
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(cache.get(&name("k")).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn never_past_the_records_own_expiry() {
        let cache = ReplayCache::new(1 << 20);
        cache.insert(
            name("k"),
            &record(10),
            Duration::from_secs(60),
            Duration::ZERO,
        );
        assert!(
            cache.get(&name("k")).is_none(),
            "a record with no time left is not kept"
        );
        let left = Duration::from_millis(300);
        cache.insert(name("k"), &record(10), Duration::from_secs(60), left);
        tokio::time::advance(Duration::from_millis(301)).await;
        assert!(cache.get(&name("k")).is_none());
    }

    #[test]
    fn the_byte_budget_pushes_out_the_oldest() {
        let cache = ReplayCache::new(3 * (1000 + ENTRY_OVERHEAD));
        for key in ["a", "b", "c", "d"] {
            cache.insert(name(key), &record(1000), Duration::from_secs(60), DAY);
        }
        assert!(cache.get(&name("a")).is_none());
        assert!(cache.get(&name("b")).is_some() && cache.get(&name("d")).is_some());
        cache.invalidate(&name("d"));
        assert!(cache.get(&name("d")).is_none());
        assert!(cache.entries().bytes <= 3 * (1000 + ENTRY_OVERHEAD));
    }

    #[test]
    fn large_bodies_are_not_cached() {
        let cache = ReplayCache::new(1 << 30);
        cache.insert(
            name("big"),
            &record(MAX_ENTRY_BYTES + 1),
            Duration::from_secs(60),
            DAY,
        );
        assert!(cache.get(&name("big")).is_none());
    }
}
