//! Fencing tokens: which holder a reservation belongs to.
//!
//! Every reservation gets a fresh token, and a store applies a completion, renewal or release
//! only while the record is still the in-flight record of that token. A holder whose lease ran
//! out and whose key was taken over can therefore never overwrite the newer record.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use super::clock::now_millis;

/// Identifies one holder of a reservation; a completion must present the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// A fresh token, unpredictable and unique in practice across processes and replicas.
    pub fn generate() -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        // RandomState is seeded from the OS once per process and varies per instance.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        hasher.write_u64(now_millis());
        Self(hasher.finish())
    }

    /// The token with this number (as stored).
    pub fn from_u64(raw: u64) -> Self {
        Self(raw)
    }

    /// The token's number, as stored.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ() {
        let tokens: std::collections::HashSet<_> =
            (0..1000).map(|_| FencingToken::generate()).collect();
        assert_eq!(tokens.len(), 1000);
    }
}
