//! The memory store's maps: one shard's map of records, filed under their digest keys
//! (`digest_key.rs`), with the sweep that keeps it bounded. `mod.rs` holds the store that
//! locks a shard per call.
//!
//! A record is kept as its encoding (`model/encoding.rs`), the bytes every other store keeps:
//! one allocation beside the entry's box, where the decoded record took four (the header
//! map's two tables, the buffer of its values and body, and that buffer's share count), and
//! held 2.4 times the encoding's size against 1.2 now (`benches/record_bytes.rs`). Decoding a
//! replay takes the body and the header values as slices of it.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use bytes::Bytes;
use tokio::time::Instant;

use crate::model::FencingToken;
use crate::store::digest_key::{ByDigestKey, DigestKey};

/// Records are spread over this many maps, each behind its own lock, so that neither a busy
/// key nor a map growing past a resize stalls every other request. A map doubles all at once,
/// under its lock and on the worker thread that inserted: with 16 maps, a store of a few hundred
/// thousand records stalled a worker for milliseconds at each doubling (keyed p99 under load
/// 28.7 ms against 9.5 ms with 256 maps, in the same rounds).
pub(super) const SHARDS: usize = 256;

/// The map a record lives in. The maps place records by the keyed hash's low bits and compare
/// its top seven: taking the shard from those would leave every map using part of its table, or
/// matching every tag.
pub(super) fn shard(key: &DigestKey) -> usize {
    (key.hash >> 32) as usize % SHARDS
}

#[derive(Debug, Default)]
pub(super) struct Entries {
    /// Each record's encoding and when it expires. Boxed, so that a doubling moves a pointer
    /// per record rather than the entry.
    records: HashMap<DigestKey, Box<(Bytes, Instant)>, ByDigestKey>,
    /// When the earliest entry written since the last sweep expires: sweeping before then
    /// would scan every entry and find nothing to drop.
    next_sweep: Option<Instant>,
}

impl Entries {
    /// The live record under `key`; an expired one is dropped on the way.
    pub(super) fn live(&mut self, key: &DigestKey, now: Instant) -> Option<&mut (Bytes, Instant)> {
        // One probe: a record looked up and then fetched again cost two, each a likely cache
        // miss in a large store.
        match self.records.entry(*key) {
            Entry::Occupied(slot) if slot.get().1 <= now => {
                slot.remove();
                None
            }
            Entry::Occupied(slot) => Some(&mut **slot.into_mut()),
            Entry::Vacant(_) => None,
        }
    }

    pub(super) fn held_by(
        &mut self,
        key: &DigestKey,
        token: FencingToken,
        now: Instant,
    ) -> Option<&mut (Bytes, Instant)> {
        self.live(key, now)
            .filter(|(record, _)| record.starts_with(&token.in_flight_prefix()))
    }

    /// Inserts, first sweeping out expired entries when one may be due, so a store under
    /// steady load stays bounded without scanning on every write.
    pub(super) fn insert(&mut self, key: DigestKey, record: Bytes, expires: Instant) {
        let now = Instant::now();
        if self.next_sweep.is_some_and(|due| due <= now) {
            let mut earliest: Option<Instant> = None;
            self.records.retain(|_, entry| {
                let at = entry.1;
                let live = at > now;
                if live {
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
                live
            });
            self.next_sweep = earliest;
        }
        self.next_sweep = Some(self.next_sweep.map_or(expires, |due| due.min(expires)));
        self.records.insert(key, Box::new((record, expires)));
    }

    /// Drops whatever is under `key`.
    pub(super) fn remove(&mut self, key: &DigestKey) {
        self.records.remove(key);
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, RandomState};
    use std::time::Duration;

    use super::*;
    use crate::model::{Fingerprint, InFlightRecord};

    fn entry_key(n: u8) -> DigestKey {
        DigestKey {
            hash: RandomState::new().hash_one(n),
            name_digest: [n; 32],
        }
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_once_one_is_due() {
        let mut entries = Entries::default();
        let record = InFlightRecord::fresh(Fingerprint::from_bytes([1; 32]))
            .1
            .encode();
        let now = Instant::now();
        for n in 0..100 {
            entries.insert(entry_key(n), record.clone(), now + Duration::from_secs(1));
        }
        let long = now + Duration::from_secs(60);
        entries.insert(entry_key(100), record.clone(), long);
        assert_eq!(entries.records.len(), 101, "nothing is due yet");
        tokio::time::advance(Duration::from_secs(2)).await;
        entries.insert(
            entry_key(101),
            record,
            Instant::now() + Duration::from_secs(60),
        );
        assert_eq!(entries.records.len(), 2, "the expired hundred are gone");
        assert_eq!(entries.next_sweep, Some(long));
    }

    #[test]
    fn entries_with_one_hash_stay_apart_by_their_digests() {
        // Two names whose keyed hashes agree still name two records.
        let mut entries = Entries::default();
        let record = InFlightRecord::fresh(Fingerprint::from_bytes([1; 32]))
            .1
            .encode();
        let expires = Instant::now() + Duration::from_secs(60);
        let first = DigestKey {
            hash: 7,
            name_digest: [1; 32],
        };
        let second = DigestKey {
            name_digest: [2; 32],
            ..first
        };
        entries.insert(first, record.clone(), expires);
        assert!(entries.live(&second, Instant::now()).is_none());
        entries.insert(second, record, expires);
        assert_eq!(entries.records.len(), 2);
    }
}
