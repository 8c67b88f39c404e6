//! The in-flight record each reservation of this process wrote, by its token, while its holder
//! may still renew, complete or release it.
//!
//! The native fenced commands compare whole values, and the store's callers hand back only the
//! token, so the store keeps the bytes it wrote. This is a cache, not a source of truth: a token
//! it does not know (a stranger's, or one pushed out) is fenced by the script, which compares
//! the prefix the token alone gives; a missing entry costs a script, never a wrong answer.
//!
//! An entry goes when its holder's completion or release has been answered. Those whose holder
//! never came back (its completion kept failing, say) are pushed out by newer ones: each shard
//! keeps two generations of at most `GENERATION` entries still held, and starting a third drops
//! the oldest. So a process holds at most `2 * SHARDS * GENERATION` records (about 8 MiB), and
//! an entry is dropped only once its shard has taken `GENERATION` newer ones whose holders are
//! all still at work: far more requests than a proxy runs at once.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use idempotency_core::backend::FencingToken;

/// Tokens are random, so their low bits spread them over the shards evenly.
const SHARDS: usize = 8;
const GENERATION: usize = 2048;

pub(crate) struct HeldRecords {
    shards: [Mutex<Shard>; SHARDS],
}

#[derive(Default)]
struct Shard {
    current: HashMap<u64, Bytes>,
    previous: HashMap<u64, Bytes>,
}

impl Default for HeldRecords {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

impl HeldRecords {
    pub(crate) fn hold(&self, token: FencingToken, encoded: Bytes) {
        let mut shard = self.shard(token);
        if shard.current.len() >= GENERATION {
            shard.previous = std::mem::take(&mut shard.current);
        }
        shard.current.insert(token.as_u64(), encoded);
    }

    pub(crate) fn get(&self, token: FencingToken) -> Option<Bytes> {
        let shard = self.shard(token);
        let token = token.as_u64();
        shard
            .current
            .get(&token)
            .or_else(|| shard.previous.get(&token))
            .cloned()
    }

    pub(crate) fn forget(&self, token: FencingToken) {
        let mut shard = self.shard(token);
        let token = token.as_u64();
        if shard.current.remove(&token).is_none() {
            shard.previous.remove(&token);
        }
    }

    fn shard(&self, token: FencingToken) -> MutexGuard<'_, Shard> {
        // The remainder is below SHARDS, so it fits any usize.
        let index = (token.as_u64() % SHARDS as u64) as usize;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens that all land in one shard, numbered from `first`.
    fn same_shard(first: u64, count: usize) -> Vec<FencingToken> {
        (0..count as u64)
            .map(|n| FencingToken::from_u64((first + n) * SHARDS as u64))
            .collect()
    }

    #[test]
    fn a_held_record_is_found_until_forgotten() {
        let held = HeldRecords::default();
        let token = FencingToken::from_u64(42);
        assert_eq!(held.get(token), None);
        held.hold(token, Bytes::from_static(b"\x01\x00record"));
        assert_eq!(held.get(token).as_deref(), Some(&b"\x01\x00record"[..]));
        assert_eq!(held.get(FencingToken::from_u64(43)), None);
        held.forget(token);
        assert_eq!(held.get(token), None);
    }

    #[test]
    fn the_oldest_records_are_pushed_out_by_newer_ones() {
        let held = HeldRecords::default();
        let tokens = same_shard(1, 3 * GENERATION);
        for token in &tokens {
            held.hold(*token, Bytes::from_static(b"r"));
        }
        let kept = tokens.iter().filter(|t| held.get(**t).is_some()).count();
        assert!(kept <= 2 * GENERATION, "{kept} kept");
        assert_eq!(held.get(tokens[0]), None, "the oldest is gone");
        let recent = &tokens[tokens.len() - GENERATION..];
        assert!(recent.iter().all(|t| held.get(*t).is_some()));
    }

    #[test]
    fn a_record_of_the_previous_generation_is_found_and_forgotten() {
        let held = HeldRecords::default();
        let tokens = same_shard(1, GENERATION + 1);
        for token in &tokens {
            held.hold(*token, Bytes::from_static(b"r"));
        }
        assert!(held.get(tokens[0]).is_some());
        held.forget(tokens[0]);
        assert_eq!(held.get(tokens[0]), None);
    }
}
