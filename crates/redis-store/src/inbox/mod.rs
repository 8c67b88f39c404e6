//! Inbox queues in Redis (docs/reference.md#inbox-routes): the [`Inbox`] operations of the Redis store, each
//! one Lua script (`inbox/scripts.rs`) over the keys of one queue shard
//! (`inbox/keys.rs`).
//!
//! A queue is sorted sets scored by time: `due` holds every live delivery by the time it may
//! next be attempted, `lease` the claimed ones by the end of their lease, `arrived` the live
//! ones by arrival, `dead` the dead ones (all scored 0, so they sort by id, which is by
//! arrival). `claim` takes members of `due` scored up to now and re-scores them to now plus the
//! lease, so a claim whose replica died is simply due again when its lease ends; a retry is a
//! re-score to the backoff's due time. Counts are sorted-set sizes and one `ZCOUNT`, never a
//! scan: pending is `due` minus the unexpired leases, in flight the unexpired leases.
//!
//! Why not Streams with consumer groups: a stream entry has no due time of its own. Backoff
//! would need a second structure anyway, and the pending entries list only knows how long an
//! entry has been idle, so `XCLAIM`/`XAUTOCLAIM` idle times can stand in for a lease but not for
//! "due in 40 seconds" after the fifth failure. Leases, due times and backoff are all just a
//! score in a sorted set.
//!
//! Records and deliveries are stored as their model encodings; a sealing decorator in front
//! has already encrypted what is secret, so bodies are opaque bytes here.

mod keys;
mod scripts;
mod shard;

pub(crate) use keys::{InboxLayout, Resting, CLUSTER_SHARDS};

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::commands::millis;
use crate::store::{RedisConnection, RedisStore};
use idempotency_core::backend::{
    unix_millis, CompletedRecord, Delivery, DeliveryId, InboxQueues, Record, RouteName, ScopedKey,
};
use idempotency_core::backend::{Acceptance, Claim, Inbox, Settlement};
use idempotency_core::{backend::Fenced, StoreError};
use keys::{token_shard, ShardKeys};
use scripts::{ACCEPT, REMOVE_DEAD, RETRY_DEAD};
use shard::error_arg;

#[async_trait]
impl<C: RedisConnection> Inbox for RedisStore<C> {
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError> {
        if let Some(existing) = self.proxy_record(key).await? {
            return Ok(Acceptance::Existing(existing));
        }
        let k = self.shard(key.route(), self.inbox.shard_of(key));
        let ack = ack.encode();
        let (ttl, id, encoded) = (millis(ttl), delivery.id.to_string(), delivery.encode());
        let arrived = unix_millis(delivery.received_at).to_string();
        let attempts = delivery.attempts.to_string();
        let status = delivery.last_status.map_or(0, |s| s.as_u16()).to_string();
        let error = error_arg(delivery.last_error.as_deref());
        let args: [&[u8]; 8] = [
            &ack,
            ttl.as_bytes(),
            id.as_bytes(),
            &encoded,
            arrived.as_bytes(),
            attempts.as_bytes(),
            status.as_bytes(),
            error.as_bytes(),
        ];
        let record = self.inbox.record(&self.prefix, key);
        let keys = vec![record, k.hash(), k.due(), k.arrived()];
        let existing: Option<Vec<u8>> = self.eval(ACCEPT.on_keys(keys, &args)).await?;
        match existing {
            None => Ok(Acceptance::Queued),
            Some(raw) => Ok(Acceptance::Existing(Record::decode(Bytes::from(raw))?)),
        }
    }

    /// Walks the shards round-robin from a different one each call, so a backlog in one shard
    /// never starves the others (`claim_walk`, which also says how a shard that fails is
    /// passed over). Earliest due first within a shard; across shards no order is promised.
    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let first = self.cursor.fetch_add(1, Ordering::Relaxed);
        self.claim_walk(queue, first, (now, lease), max).await
    }

    async fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        let shard = token_shard(claim.token);
        if shard >= self.inbox.shard_count() {
            return Ok(Fenced::LeaseLost);
        }
        let k = self.shard(queue, shard);
        let id = claim.delivery.id.to_string();
        self.settle_in(&k, &id, claim.token, settlement).await
    }

    async fn queues(&self, queue: &RouteName, now: SystemTime) -> Result<InboxQueues, StoreError> {
        let now_ms = unix_millis(now);
        let (mut live, mut counted, mut oldest) = (0, InboxQueues::default(), None::<f64>);
        for shard in self.inbox.shards() {
            let (all, in_flight, dead, first) =
                self.counts(queue, shard, &now_ms.to_string()).await?;
            live += all;
            counted.in_flight += in_flight;
            counted.dead += dead;
            oldest = match (oldest, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        counted.pending = live.saturating_sub(counted.in_flight);
        // Scores are whole milliseconds, well within an f64's exact integers.
        let oldest = oldest.map_or(now_ms, |at| at as u64);
        counted.oldest_pending = Duration::from_millis(now_ms.saturating_sub(oldest));
        Ok(counted)
    }

    /// Each shard's first `limit` after `after`, merged in id order.
    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        let count = limit.to_string();
        let mut dead = Vec::new();
        for shard in self.inbox.shards() {
            dead.extend(self.dead_shard(queue, shard, &start, &count).await?);
        }
        dead.sort_by_key(|d| d.id);
        dead.truncate(limit);
        Ok(dead)
    }

    async fn retry_dead(
        &self,
        queue: &RouteName,
        id: DeliveryId,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        let (id, now) = (id.to_string(), unix_millis(now).to_string());
        let args: [&[u8]; 2] = [id.as_bytes(), now.as_bytes()];
        let keys = |k: &ShardKeys| vec![k.hash(), k.due(), k.arrived(), k.dead()];
        self.on_dead(queue, &RETRY_DEAD, keys, &args).await
    }

    async fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> Result<bool, StoreError> {
        let id = id.to_string();
        let args: [&[u8]; 1] = [id.as_bytes()];
        let keys = |k: &ShardKeys| vec![k.hash(), k.dead()];
        self.on_dead(queue, &REMOVE_DEAD, keys, &args).await
    }
}
