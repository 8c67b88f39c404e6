//! The bounded map behind [`CachingStore`](super::CachingStore): completed records by the
//! SHA-256 of their store name, each fresh until a fixed instant, the whole bounded by the bytes
//! it holds.
//!
//! The digest rather than the name: it is made once per request anyway (for the log line), and
//! a fixed-width key lives in the map and the order queue without an allocation each. The
//! queue holds each key with its keyed hash (`digest_key.rs`), so pushing out the oldest entry
//! hashes nothing, and an insert hashes its own key once and probes the map twice: once to push
//! out the oldest, once to put the new entry in, taking back any copy it replaces. Every first
//! request with a key in front of Redis or the file store inserts here, so each probe counts: the
//! map is a few megabytes and a probe is a likely cache miss.
//!
//! An entry's freshness is set once, when it is stored: serving it does not extend it, so a
//! record dropped on another replica is never answered here for longer than the time it was
//! given. Oldest entries leave first when the budget is full.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::RandomState;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::digest_key::{ByDigestKey, DigestKey};
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
    /// Keys the map's hashes, so nobody can choose names that pile up in one place.
    secret: RandomState,
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<DigestKey, Cached, ByDigestKey>,
    /// Insertion order; a pair whose number no longer matches the map's entry is stale.
    order: VecDeque<(u64, DigestKey)>,
    bytes: usize,
    inserted: u64,
}

/// A copy of a record, with its freshness, the insertion number `order` names it by, and what
/// it counts against the budget.
#[derive(Debug)]
struct Cached {
    record: CompletedRecord,
    fresh_until: Instant,
    number: u64,
    /// Weighed once, when it comes in: an entry pushed out is the oldest, long out of the CPU's
    /// caches, and weighing it again would read its header map only to throw it away.
    bytes: usize,
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
            secret: RandomState::new(),
            inner: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Every change leaves map, order and count consistent before the lock is released.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key(&self, name_digest: &NameDigest) -> DigestKey {
        DigestKey::new(&self.secret, *name_digest)
    }

    /// The cached record under `name_digest`, if it is still fresh.
    pub fn get(&self, name_digest: &NameDigest) -> Option<CompletedRecord> {
        let key = self.key(name_digest);
        let mut entries = self.entries();
        match entries.map.entry(key) {
            Entry::Occupied(slot) if slot.get().fresh_until > Instant::now() => {
                Some(slot.get().record.clone())
            }
            Entry::Occupied(slot) => {
                entries.bytes -= slot.remove().bytes;
                None
            }
            Entry::Vacant(_) => None,
        }
    }

    /// Keeps `record` for `ttl` at most, and never past `record_left`, the time its record has
    /// left in the store.
    pub fn insert(
        &self,
        name_digest: NameDigest,
        record: &CompletedRecord,
        ttl: Duration,
        record_left: Duration,
    ) {
        let ttl = ttl.min(record_left);
        let bytes = size(record);
        if ttl.is_zero() || bytes > MAX_ENTRY_BYTES.min(self.budget) {
            return;
        }
        let key = self.key(&name_digest);
        let fresh_until = Instant::now() + ttl;
        let mut entries = self.entries();
        // A copy this one replaces is counted until it is taken out below, so room is made
        // for both: at worst one more old entry leaves than had to.
        while entries.bytes + bytes > self.budget && entries.push_out_oldest() {}
        entries.inserted += 1;
        let number = entries.inserted;
        entries.bytes += bytes;
        entries.order.push_back((number, key));
        let cached = Cached {
            record: record.clone(),
            fresh_until,
            number,
            bytes,
        };
        if let Some(replaced) = entries.map.insert(key, cached) {
            entries.bytes -= replaced.bytes;
        }
        entries.compact();
    }

    /// Forgets `name_digest` (an operator dropped the record).
    pub(crate) fn invalidate(&self, name_digest: &NameDigest) {
        let key = self.key(name_digest);
        let mut entries = self.entries();
        if let Some(dropped) = entries.map.remove(&key) {
            entries.bytes -= dropped.bytes;
        }
    }
}

impl Entries {
    /// Takes the oldest name off the queue, and its entry out of the map unless a later insert
    /// replaced it; false when the queue is empty.
    fn push_out_oldest(&mut self) -> bool {
        let Some((number, oldest)) = self.order.pop_front() else {
            return false;
        };
        if let Entry::Occupied(slot) = self.map.entry(oldest) {
            if slot.get().number == number {
                self.bytes -= slot.remove().bytes;
            }
        }
        true
    }

    /// Drops stale names from `order` once they outnumber the live ones, so it stays bounded.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(number, key)| map.get(key).is_some_and(|entry| entry.number == *number));
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
    fn a_replaced_copy_is_counted_once_and_leaves_from_its_new_place() {
        let one = |len: usize| len + ENTRY_OVERHEAD;
        let cache = ReplayCache::new(3 * one(1000));
        let minute = Duration::from_secs(60);
        cache.insert(name("a"), &record(1000), minute, DAY);
        cache.insert(name("b"), &record(1000), minute, DAY);
        cache.insert(name("a"), &record(500), minute, DAY);
        assert_eq!(cache.entries().bytes, one(1000) + one(500));
        let copy = cache.get(&name("a")).expect("the new copy");
        assert_eq!(copy.body, StoredBody::Kept(Bytes::from(vec![0; 500])));
        cache.insert(name("c"), &record(1000), minute, DAY);
        // Full: "a" is first in the queue but was replaced since, so "b" is the oldest.
        cache.insert(name("d"), &record(1000), minute, DAY);
        assert!(cache.get(&name("b")).is_none());
        for kept in ["a", "c", "d"] {
            assert!(cache.get(&name(kept)).is_some(), "{kept} is kept");
        }
        assert_eq!(cache.entries().bytes, one(500) + 2 * one(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_copy_found_by_a_lookup_gives_its_bytes_back() {
        let cache = ReplayCache::new(1 << 20);
        cache.insert(name("k"), &record(10), Duration::from_secs(1), DAY);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(cache.get(&name("k")).is_none());
        assert_eq!(cache.entries().bytes, 0);
        assert!(cache.entries().map.is_empty());
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
