//! Where the Redis store keeps inbox queues: key names, shards and hash tags.
//!
//! A route's queue is split into shards; shard `s` of route `r` lives in five keys that share
//! the hash tag `{r:s}` (`prefix + "inbox:{r:s}:" + name`), so on Redis Cluster a shard is one
//! slot and every script over it is atomic on one master. A delivery goes to the shard its
//! key's digest picks, and on a cluster its acknowledgement record is named with the same tag
//! (`prefix + "{r:s}:" + scope + ":" + key`), so `accept` writes the record and queues the
//! delivery in one script. Records of proxy-mode requests keep their names
//! (`prefix + storage_key`), untagged, spread over every slot.
//!
//! Why shards on a cluster: one slot lives on one master, so a route kept in one slot would put
//! every acknowledgement and every claim of that route on one machine, however many masters the
//! cluster has. A single Redis has nothing to spread over: it keeps one shard and the records'
//! usual names.
//!
//! Shards whose claims fail (their master down) are passed over for a moment (`Resting`).
//!
//! A claim's token carries its shard in its low byte, so `settle` (which knows only the id and
//! the token) goes straight to the right shard.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use idempotency_core::backend::{FencingToken, RouteName, ScopedKey};

/// How many shards a cluster splits each route's queue into.
pub(crate) const CLUSTER_SHARDS: u16 = 16;

/// How the store lays inbox queues out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InboxLayout {
    /// Shards per route, 1 to 256.
    shards: u16,
    /// Whether inbox records are named with their shard's hash tag (a cluster).
    tagged_records: bool,
}

impl InboxLayout {
    /// One Redis: one shard per route, records under their usual names.
    pub(crate) const SINGLE: Self = Self {
        shards: 1,
        tagged_records: false,
    };

    /// Redis Cluster: `shards` per route (at most 256), records in their shard's slot.
    pub(crate) fn sharded(shards: u16) -> Self {
        Self {
            shards: shards.clamp(1, 256),
            tagged_records: true,
        }
    }

    /// Every shard of a route, in order.
    pub(crate) fn shards(&self) -> impl Iterator<Item = u16> + use<> {
        0..self.shards
    }

    pub(crate) fn shard_count(&self) -> u16 {
        self.shards
    }

    /// The shard `key`'s delivery goes to.
    pub(crate) fn shard_of(&self, key: &ScopedKey) -> u16 {
        let digest = Sha256::digest(key.storage_key().as_bytes());
        u16::from_be_bytes([digest[0], digest[1]]) % self.shards
    }

    /// The name of `key`'s record when its route is an inbox, where that differs from the
    /// proxy-mode name `prefix + storage_key`.
    pub(crate) fn tagged_record(&self, prefix: &str, key: &ScopedKey) -> Option<String> {
        if !self.tagged_records {
            return None;
        }
        let route = key.route().as_str();
        // The storage key is `route:scope:key`; the route moves into the tag.
        let rest = &key.storage_key()[route.len()..];
        let shard = self.shard_of(key);
        Some(format!("{prefix}{{{route}:{shard}}}{rest}"))
    }

    /// The record `accept` writes for `key`.
    pub(crate) fn record(&self, prefix: &str, key: &ScopedKey) -> String {
        self.tagged_record(prefix, key)
            .unwrap_or_else(|| format!("{prefix}{}", key.storage_key()))
    }
}

/// A fresh claim token that names `shard`.
pub(crate) fn claim_token(shard: u16) -> FencingToken {
    let random = FencingToken::generate().as_u64() & !0xFF;
    FencingToken::from_u64(random | u64::from(shard & 0xFF))
}

/// The shard a claim token names.
pub(crate) fn token_shard(token: FencingToken) -> u16 {
    (token.as_u64() & 0xFF) as u16
}

/// The keys of one shard of one route's queue.
pub(crate) struct ShardKeys {
    base: String,
    number: u16,
}

impl ShardKeys {
    pub(crate) fn new(prefix: &str, route: &RouteName, shard: u16) -> Self {
        Self {
            base: format!("{prefix}inbox:{{{route}:{shard}}}:"),
            number: shard,
        }
    }

    /// Which of its route's shards this is.
    pub(crate) fn number(&self) -> u16 {
        self.number
    }

    /// What every key of the shard starts with, which names the shard.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    fn name(&self, name: &str) -> String {
        format!("{}{name}", self.base)
    }

    /// The delivery hash: encodings and attempt state by id.
    pub(crate) fn hash(&self) -> String {
        self.name("deliveries")
    }

    /// Live deliveries by due time (a claimed one's due time is its lease's end).
    pub(crate) fn due(&self) -> String {
        self.name("due")
    }

    /// Claimed deliveries by the end of their lease; settling takes them out.
    pub(crate) fn lease(&self) -> String {
        self.name("lease")
    }

    /// Live deliveries by arrival, for the oldest one's age.
    pub(crate) fn arrived(&self) -> String {
        self.name("arrived")
    }

    /// Dead deliveries, all scored 0, so they sort by id (which is by arrival).
    pub(crate) fn dead(&self) -> String {
        self.name("dead")
    }
}

/// How long a shard that failed a claim is passed over.
const REST: Duration = Duration::from_secs(1);

/// Queue shards whose last claim failed (their master down, say), by name, with when walks
/// may try them again.
#[derive(Debug, Default)]
pub(crate) struct Resting(Mutex<HashMap<String, Instant>>);

impl Resting {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        // Every change is one insert or removal: nothing is left half done by a panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether walks pass `shard` over now; forgets it once its rest is over.
    pub(crate) fn rests(&self, shard: &str) -> bool {
        let mut map = self.map();
        match map.get(shard) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                map.remove(shard);
                false
            }
            None => false,
        }
    }

    pub(crate) fn failed(&self, shard: &str) {
        self.map().insert(shard.to_owned(), Instant::now() + REST);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idempotency_core::backend::IdempotencyKey;

    fn key(raw: &str) -> ScopedKey {
        let route = RouteName::new("hooks").unwrap();
        ScopedKey::new(route, None, IdempotencyKey::new(raw).unwrap())
    }

    #[test]
    fn a_cluster_names_inbox_records_in_their_shards_slot() {
        let layout = InboxLayout::sharded(CLUSTER_SHARDS);
        let shard = layout.shard_of(&key("evt:1"));
        let record = layout.record("p:", &key("evt:1"));
        assert_eq!(record, format!("p:{{hooks:{shard}}}:-:evt:1"));
        let queue = ShardKeys::new("p:", &RouteName::new("hooks").unwrap(), shard);
        assert!(queue
            .due()
            .starts_with(&format!("p:inbox:{{hooks:{shard}}}")));
        assert_eq!(
            InboxLayout::SINGLE.record("p:", &key("evt:1")),
            "p:hooks:-:evt:1"
        );
    }

    #[test]
    fn keys_spread_over_every_shard_and_tokens_remember_theirs() {
        let layout = InboxLayout::sharded(CLUSTER_SHARDS);
        let used: std::collections::HashSet<u16> = (0..500)
            .map(|n| layout.shard_of(&key(&format!("evt_{n}"))))
            .collect();
        assert_eq!(used.len(), usize::from(CLUSTER_SHARDS));
        for shard in layout.shards() {
            assert_eq!(token_shard(claim_token(shard)), shard);
        }
    }

    #[test]
    fn a_failed_shard_rests_and_the_others_do_not() {
        let resting = Resting::default();
        resting.failed("a");
        assert!(resting.rests("a"));
        assert!(!resting.rests("b"));
    }
}
