//! What the in-memory maps file a record under: the SHA-256 of its store name, beside a hash of
//! that digest keyed by this process's secret. The memory store and the replay cache both use it.
//!
//! Fixed-width and held in the map itself, so a doubling rehashes each entry by reading a number
//! beside it, where a name kept on the heap cost a hash of the whole name and a cache miss to
//! reach it; and a queue that names entries (the replay cache's order of insertion) finds them
//! again without hashing anything. The keyed hash, not the digest, places entries: anyone can
//! search for names whose digests collide in a map's low bits, nobody can for the keyed hash.

use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher, RandomState};

/// A record's name digest and its keyed hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DigestKey {
    pub(super) hash: u64,
    pub(super) name_digest: [u8; 32],
}

impl Hash for DigestKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl DigestKey {
    /// The key for `name_digest`, hashed with `secret`.
    pub(super) fn new(secret: &RandomState, name_digest: [u8; 32]) -> Self {
        Self {
            hash: secret.hash_one(name_digest),
            name_digest,
        }
    }
}

/// The hasher of a map keyed by [`DigestKey`]s.
pub(super) type ByDigestKey = BuildHasherDefault<PassThrough>;

/// Passes a [`DigestKey`]'s hash through: it is already keyed and spread.
#[derive(Debug, Default)]
pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is ever called; folding keeps any other input hashed, not dropped.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_hash_is_the_keyed_hash() {
        let secret = RandomState::new();
        let key = DigestKey::new(&secret, [7; 32]);
        assert_eq!(key.hash, secret.hash_one([7u8; 32]));
        assert_eq!(ByDigestKey::default().hash_one(key), key.hash);
    }
}
