//! The in-memory index of records: where in the log each key's current record is.
//!
//! A key is held as the first 16 bytes of the SHA-256 of its storage name (`KeyDigest`), which
//! the key carries already: 24 bytes a completed record with its place in the log, whatever
//! the key's length, and as unique as the name (two names would collide with a chance of
//! about one in 10^20 among a billion keys). Maps place digests by a hash keyed with this
//! process's secret: anyone can search for names whose digests share low bits, nobody can for
//! the keyed hash.
//!
//! Completed records are spread over `SHARDS` maps: a map doubles all at once, on the writer
//! thread, and a day of keys in one map would stall every request for the length of a copy of
//! gigabytes. In-flight records are few (the requests running now, and those whose holder died
//! within a lease) and are held whole, so that the fenced writes and a duplicate's answer need
//! no read of the log.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

use sha2::{Digest, Sha256};

use super::journal::Loc;
use super::values;

/// The index's name for a record: the first half of the SHA-256 of its storage name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct KeyDigest([u8; 16]);

impl KeyDigest {
    /// From the whole SHA-256 of the name, as a `ScopedKey` carries it.
    pub(super) fn from_sha256(digest: &[u8; 32]) -> Self {
        Self(digest[..16].try_into().expect("sixteen bytes"))
    }

    /// From the name, as the log holds it.
    pub(super) fn of_name(name: &str) -> Self {
        Self::from_sha256(&Sha256::digest(name.as_bytes()).into())
    }
}

/// Maps of completed records; a power of two.
const SHARDS: usize = 1024;

/// Where each completed record is.
pub(super) struct Completed {
    secret: RandomState,
    shards: Vec<HashMap<KeyDigest, Loc, RandomState>>,
    len: usize,
}

impl Completed {
    pub(super) fn new(secret: &RandomState) -> Self {
        Self {
            secret: secret.clone(),
            shards: (0..SHARDS)
                .map(|_| HashMap::with_hasher(secret.clone()))
                .collect(),
            len: 0,
        }
    }

    /// A map places entries by the hash's low bits and tags them with its top seven: the shard
    /// comes from bits between, used by neither.
    fn shard(&self, key: &KeyDigest) -> usize {
        (self.secret.hash_one(key) >> 32) as usize & (SHARDS - 1)
    }

    pub(super) fn get(&self, key: &KeyDigest) -> Option<Loc> {
        self.shards[self.shard(key)].get(key).copied()
    }

    /// Points `key` at `loc`; where it pointed before, if anywhere.
    pub(super) fn insert(&mut self, key: KeyDigest, loc: Loc) -> Option<Loc> {
        let shard = self.shard(&key);
        let old = self.shards[shard].insert(key, loc);
        self.len += usize::from(old.is_none());
        old
    }

    pub(super) fn remove(&mut self, key: &KeyDigest) -> Option<Loc> {
        let shard = self.shard(key);
        let old = self.shards[shard].remove(key);
        self.len -= usize::from(old.is_some());
        old
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// An in-flight record, held whole: where it is, and its stored value (expiry and encoding).
#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) loc: Loc,
    pub(super) value: Box<[u8]>,
}

impl Held {
    pub(super) fn expiry(&self) -> u64 {
        values::expiry(&self.value)
    }

    pub(super) fn record(&self) -> &[u8] {
        values::record(&self.value)
    }
}

/// The in-flight records.
pub(super) struct InFlight {
    held: HashMap<KeyDigest, Held, RandomState>,
}

impl InFlight {
    pub(super) fn new(secret: &RandomState) -> Self {
        Self {
            held: HashMap::with_hasher(secret.clone()),
        }
    }

    pub(super) fn get(&self, key: &KeyDigest) -> Option<&Held> {
        self.held.get(key)
    }

    pub(super) fn get_mut(&mut self, key: &KeyDigest) -> Option<&mut Held> {
        self.held.get_mut(key)
    }

    pub(super) fn insert(&mut self, key: KeyDigest, held: Held) -> Option<Held> {
        self.held.insert(key, held)
    }

    pub(super) fn remove(&mut self, key: &KeyDigest) -> Option<Held> {
        self.held.remove(key)
    }

    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    /// Forgets records that expired by `now`: they count as absent, and the log keeps them only
    /// until their segment is retired.
    pub(super) fn forget_expired(&mut self, now: u64) {
        self.held.retain(|_, held| held.expiry() > now);
        if self.held.capacity() > 4 * self.held.len().max(1024) {
            self.held.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_the_front_of_the_names_sha256() {
        let full: [u8; 32] = Sha256::digest(b"route:-:key").into();
        assert_eq!(
            KeyDigest::of_name("route:-:key"),
            KeyDigest::from_sha256(&full)
        );
        assert_ne!(
            KeyDigest::of_name("route:-:key"),
            KeyDigest::of_name("route:-:kez")
        );
    }

    #[test]
    fn completed_records_are_counted_across_shards() {
        let mut completed = Completed::new(&RandomState::new());
        let keys: Vec<KeyDigest> = (0..5000)
            .map(|n| KeyDigest::of_name(&n.to_string()))
            .collect();
        for (n, key) in keys.iter().enumerate() {
            assert_eq!(completed.insert(*key, Loc::new(1, n as u64)), None);
        }
        assert_eq!(
            completed.insert(keys[7], Loc::new(2, 0)),
            Some(Loc::new(1, 7))
        );
        assert_eq!(completed.len(), 5000);
        assert_eq!(completed.remove(&keys[7]), Some(Loc::new(2, 0)));
        assert_eq!(completed.remove(&keys[7]), None);
        assert_eq!(completed.len(), 4999);
        assert_eq!(completed.get(&keys[8]), Some(Loc::new(1, 8)));
        let used = completed.shards.iter().filter(|s| !s.is_empty()).count();
        assert!(used > SHARDS / 2, "{used} shards used");
    }
}
