//! The Redis store's inbox operations on one queue shard (`inbox/keys.rs`), each one
//! script call (`inbox/scripts.rs`), and how a delivery is read back from a script's rows.
//! `inbox/mod.rs` puts them together into the [`Inbox`](idempotency_core::backend::Inbox) operations of a route.

use idempotency_core::proxy::ErrorChain;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use redis::FromRedisValue;

use super::keys::{claim_token, ShardKeys};
use super::scripts::{CLAIM, DEAD, QUEUES, SETTLE};
use crate::scripts::{Call, Lua};
use crate::store::{RedisConnection, RedisStore};
use idempotency_core::backend::{
    unix_millis, AttemptFailure, Delivery, FencingToken, Record, RecordError, RouteName, ScopedKey,
    MAX_ERROR_LEN,
};
use idempotency_core::backend::{Claim, Settlement};
use idempotency_core::{backend::Fenced, StoreError};

/// The least a shard's claim may wait for its answer, however short the lease.
const MIN_SHARD_WAIT: Duration = Duration::from_millis(100);

/// A delivery as a script answers it: id, encoding, attempts, last status, last error.
type Row = (String, Vec<u8>, i64, i64, Option<String>);

/// What `queues` answers per shard: live, in flight, dead, earliest arrival.
pub(crate) type Counts = (u64, u64, u64, Option<f64>);

impl<C: RedisConnection> RedisStore<C> {
    pub(crate) fn shard(&self, queue: &RouteName, shard: u16) -> ShardKeys {
        ShardKeys::new(&self.prefix, queue, shard)
    }

    /// Runs one script call and reads its answer.
    pub(crate) async fn eval<T: FromRedisValue>(&self, call: Call<'_>) -> Result<T, StoreError> {
        self.run(|mut conn| async move { call.run(&mut conn).await })
            .await
    }

    /// On a cluster an inbox record has a name of its own; a record the route made before it
    /// became an inbox is under the proxy-mode name, so `accept` looks there first. The look
    /// is not atomic with `accept`, which matters only while requests of both modes race for
    /// one key (during a reload that makes the route an inbox).
    pub(crate) async fn proxy_record(&self, key: &ScopedKey) -> Result<Option<Record>, StoreError> {
        if self.inbox.tagged_record(&self.prefix, key).is_none() {
            return Ok(None);
        }
        let name = format!("{}{}", self.prefix, key.storage_key());
        let found: Option<Vec<u8>> = self
            .run(|mut conn| async move { redis::cmd("GET").arg(name).query_async(&mut conn).await })
            .await?;
        Ok(found
            .map(|raw| Record::decode(Bytes::from(raw)))
            .transpose()?)
    }

    /// Takes up to `max` from the shards in round-robin order from `first`, leasing them for
    /// `lease` from `now`.
    ///
    /// Claims already taken run down their lease while the walk goes on, so a walk must not
    /// wait long: each shard call is bounded by a quarter of the lease (at most the operation
    /// time-out, at least `MIN_SHARD_WAIT`), a shard that fails ends the walk if it has taken anything, and is passed
    /// over by walks for a moment (`Resting`), so a master that is down costs a bounded wait
    /// now and then instead of one per shard per claim. A failure is an error only when no
    /// shard answered.
    pub(crate) async fn claim_walk(
        &self,
        queue: &RouteName,
        first: usize,
        (now, lease): (SystemTime, Duration),
        max: usize,
    ) -> Result<Vec<Claim>, StoreError> {
        let shards = usize::from(self.inbox.shard_count());
        let bounds = [
            unix_millis(now).to_string(),
            millis_after(now, lease).to_string(),
        ];
        let limit = self.op_timeout.min((lease / 4).max(MIN_SHARD_WAIT));
        let (mut claims, mut failure, mut answered) = (Vec::new(), None, false);
        for step in 0..shards {
            if claims.len() >= max {
                break;
            }
            let k = self.shard(queue, ((first + step) % shards) as u16);
            if self.resting.rests(k.base()) {
                continue;
            }
            match self
                .claim_shard(&k, &bounds, max - claims.len(), limit)
                .await
            {
                Ok(taken) => {
                    answered = true;
                    claims.extend(taken);
                }
                Err(e) => {
                    self.resting.failed(k.base());
                    tracing::debug!(route = %queue, shard = k.base(), error = %ErrorChain(&e), "inbox: a queue shard did not answer a claim; passed over for a moment");
                    failure = Some(e);
                    if !claims.is_empty() {
                        break;
                    }
                }
            }
        }
        match failure {
            Some(e) if !answered => Err(e),
            _ => Ok(claims),
        }
    }

    /// Claims up to `max` from one shard, due by `bounds[0]`, leased until `bounds[1]`, the
    /// call bounded by `limit`.
    async fn claim_shard(
        &self,
        k: &ShardKeys,
        bounds: &[String; 2],
        max: usize,
        limit: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let token = claim_token(k.number());
        let (max, raw_token) = (max.to_string(), token.as_u64().to_string());
        let args: [&[u8]; 4] = [
            bounds[0].as_bytes(),
            bounds[1].as_bytes(),
            max.as_bytes(),
            raw_token.as_bytes(),
        ];
        let keys = vec![k.hash(), k.due(), k.lease(), k.arrived()];
        let call = CLAIM.on_keys(keys, &args);
        let rows: Vec<Row> = self
            .run_within(limit, |mut conn| async move { call.run(&mut conn).await })
            .await?;
        let mut claims = Vec::with_capacity(rows.len());
        for row in rows {
            let id = row.0.clone();
            match delivery(row) {
                Ok(delivery) => claims.push(Claim { delivery, token }),
                Err(e) => self.bury(k, &id, token, &e).await,
            }
        }
        Ok(claims)
    }

    /// Makes a claimed delivery that cannot be decoded dead at once, with the reason as its
    /// last error: it stays counted and removable, and never blocks a claim again. Should
    /// that fail too, it is claimed (and buried) again after its lease.
    async fn bury(&self, k: &ShardKeys, id: &str, token: FencingToken, error: &StoreError) {
        tracing::warn!(shard = k.base(), delivery = id, error = %ErrorChain(error), "inbox: a stored delivery cannot be decoded; it is dead");
        let failure = AttemptFailure {
            status: None,
            error: Some(format!("cannot be decoded: {error}")),
        };
        let dead = Settlement::Dead { failure };
        if let Err(e) = self.settle_in(k, id, token, &dead).await {
            tracing::warn!(delivery = id, error = %ErrorChain(&e), "inbox: an undecodable delivery could not be made dead yet");
        }
    }

    /// Settles the claim of delivery `id` held by `token` in shard `k`.
    pub(crate) async fn settle_in(
        &self,
        k: &ShardKeys,
        id: &str,
        token: FencingToken,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        let token = token.as_u64().to_string();
        let [outcome, due, status, error] = settle_args(settlement);
        let args: [&[u8]; 6] = [
            id.as_bytes(),
            token.as_bytes(),
            outcome.as_bytes(),
            due.as_bytes(),
            status.as_bytes(),
            error.as_bytes(),
        ];
        let keys = vec![k.hash(), k.due(), k.lease(), k.arrived(), k.dead()];
        let applied: i64 = self.eval(SETTLE.on_keys(keys, &args)).await?;
        Ok(if applied == 1 {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        })
    }

    pub(crate) async fn counts(
        &self,
        queue: &RouteName,
        shard: u16,
        now: &str,
    ) -> Result<Counts, StoreError> {
        let k = self.shard(queue, shard);
        let args: [&[u8]; 1] = [now.as_bytes()];
        let keys = vec![k.due(), k.lease(), k.arrived(), k.dead()];
        self.eval(QUEUES.on_keys(keys, &args)).await
    }

    pub(crate) async fn dead_shard(
        &self,
        queue: &RouteName,
        shard: u16,
        start: &str,
        limit: &str,
    ) -> Result<Vec<Delivery>, StoreError> {
        let k = self.shard(queue, shard);
        let args: [&[u8]; 2] = [start.as_bytes(), limit.as_bytes()];
        let rows: Vec<Row> = self
            .eval(DEAD.on_keys(vec![k.hash(), k.dead()], &args))
            .await?;
        // One that cannot be decoded is left out of the list rather than failing it; its id
        // is in the log of the claim that buried it.
        Ok(rows
            .into_iter()
            .filter_map(|row| delivery(row).ok())
            .collect())
    }

    /// Runs a script about one dead delivery on each shard until one answers 1: only the id
    /// is known, not its shard, and an operator's action can afford a look at each.
    pub(crate) async fn on_dead(
        &self,
        queue: &RouteName,
        script: &'static Lua,
        keys: fn(&ShardKeys) -> Vec<String>,
        args: &[&[u8]],
    ) -> Result<bool, StoreError> {
        for shard in self.inbox.shards() {
            let call = script.on_keys(keys(&self.shard(queue, shard)), args);
            if self.eval::<i64>(call).await? == 1 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// A delivery from its stored encoding, with the attempt state kept beside it.
fn delivery((id, encoded, attempts, status, error): Row) -> Result<Delivery, StoreError> {
    let mut delivery = Delivery::decode(Bytes::from(encoded))?;
    if delivery.id.to_string() != id {
        return Err(RecordError::new("a stored delivery does not match its id").into());
    }
    delivery.attempts = u32::try_from(attempts).unwrap_or(0);
    delivery.last_status = u16::try_from(status)
        .ok()
        .and_then(|code| StatusCode::from_u16(code).ok());
    delivery.last_error = error;
    Ok(delivery)
}

/// An error as the scripts take it: `-` for none, `+` and the text for some, cut as the
/// delivery encoding cuts it, so what an attempt stores stays small.
pub(crate) fn error_arg(error: Option<&str>) -> String {
    let Some(text) = error else {
        return "-".to_owned();
    };
    let mut end = text.len().min(MAX_ERROR_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("+{}", &text[..end])
}

fn millis_after(at: SystemTime, span: Duration) -> u64 {
    unix_millis(at).saturating_add(span.as_millis().try_into().unwrap_or(u64::MAX))
}

/// The settlement as the settle script takes it: outcome, due ms, status, error.
fn settle_args(settlement: &Settlement) -> [String; 4] {
    let (outcome, due, failure) = match settlement {
        Settlement::Delivered => ("delivered", 0, None),
        Settlement::Retry { due, failure } => ("retry", unix_millis(*due), Some(failure)),
        Settlement::Dead { failure } => ("dead", 0, Some(failure)),
    };
    let status = failure.and_then(|f| f.status).map_or(0, |s| s.as_u16());
    let error = error_arg(failure.and_then(|f| f.error.as_deref()));
    [
        outcome.to_owned(),
        due.to_string(),
        status.to_string(),
        error,
    ]
}
