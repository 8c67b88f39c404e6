//! The Redis store: one Redis (or a replicated pair behind one address), or a Redis Cluster,
//! shared by any number of proxy replicas.
//!
//! Each record is one Redis string under `prefix + storage_key`, holding `Record::encode()`, with
//! a Redis expiry equal to the lease (in flight) or the ttl (completed). Keeping a record in one
//! key means every script touches exactly one key, so the same scripts run on Redis Cluster.
//!
//! Every operation is one round trip and atomic in Redis:
//! - `reserve` is `SET key value NX GET PX lease`: it sets the new in-flight record with its
//!   lease if the key is free, and otherwise answers what is there, in one native command (a
//!   script doing the same is the fallback for Redis before 7.0). Doing the read and the write
//!   from Rust would let two replicas both see "nothing there" and both forward the request.
//! - `renew`, `complete` and `release` act only while the key still holds the holder's
//!   in-flight record. A holder whose lease ran out, and whose key was taken by someone else (or
//!   completed), is told `LeaseLost` and writes nothing. Where the server has them (Valkey 8.1
//!   and 9.0, Redis 8.4) they are its own commands, `SET ... IFEQ` and `DELIFEQ` or `DELEX`,
//!   comparing the whole record the reservation wrote (`fenced`); elsewhere they are scripts
//!   comparing the value's first bytes with the holder's `FencingToken::in_flight_prefix()`,
//!   read with `GETRANGE`, so checking a large completed record costs ten bytes.
//! - `get` is a script returning the value and its `PTTL` together, so the remaining time always
//!   belongs to the value returned.
//! - `remove` is `DEL`, `ping` is `PING` (on a cluster: every master answers).
//!
//! The scripts live in `scripts.rs`. Durations travel as whole milliseconds, at least 1,
//! because `PX 0` is an error in Redis and would turn a tiny lease into a failed request.
//!
//! Inbox routes' queues live beside the records, in sorted sets per route (`inbox/mod.rs`).
//!
//! The operations are written once, over any `RedisConnection`. For one Redis that is a
//! `ConnectionManager`: multiplexed, so all callers share one socket, and it reconnects by itself
//! after Redis restarts. For a cluster it is the cluster client's connection (see
//! `cluster.rs`). Connection and response time-outs bound each attempt, and every operation as
//! a whole is bounded by the store's operation time-out, so a hung Redis turns into
//! `StoreError::Timeout` instead of a hung request.

use idempotency_core::proxy::ErrorChain;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError};

use crate::commands::{decode, millis, refused_syntax, set_if_absent, with_time_left};
use crate::fenced::{FencedWrite, Fencing};
use crate::inbox::{InboxLayout, Resting, CLUSTER_SHARDS};
use crate::per_thread::{Connect, PerThread};
use crate::scripts::{GET, RELEASE, REMOVE, RESERVE};
use idempotency_core::backend::Inbox;
use idempotency_core::backend::{
    CompletedRecord, FencingToken, Fingerprint, InFlightRecord, Record, ScopedKey,
};
use idempotency_core::{
    backend::{Fenced, Removal, Removed, Reservation},
    Store, StoreError,
};

pub use crate::fenced::{FenceCommand, FenceCommands};

/// What every key the proxy writes starts with, unless the operator picks another prefix.
pub const DEFAULT_PREFIX: &str = "idempotency-proxy:";

const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bounds `connect` as a whole, including the client's own retries.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the store needs of a connection: shared by clones (multiplexed), usable from any task.
/// `ConnectionManager` (one Redis) and the cluster client's `ClusterConnection` both qualify.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisConnection for C {}

/// A store in Redis, reached through a self-reconnecting multiplexed connection: one Redis by
/// default, or a Redis Cluster (`RedisClusterStore`).
///
/// ```no_run
/// use std::time::Duration;
/// use idempotency_core::backend::{Fingerprint, IdempotencyKey, RouteName, ScopedKey};
/// use idempotency_core::{Store, backend::Reservation};
/// use idempotency_redis_store::{RedisStore, DEFAULT_PREFIX};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // Compiled, not run by the doc tests: it needs a Redis (the crate's tests start their own).
/// let store = RedisStore::connect("redis://127.0.0.1:6379", DEFAULT_PREFIX).await.unwrap();
/// let key = ScopedKey::new(
///     RouteName::new("payments").unwrap(),
///     None,
///     IdempotencyKey::new("order-1").unwrap(),
/// );
/// let reserved = store.reserve(&key, Fingerprint::from_bytes([7; 32]), Duration::from_secs(30));
/// assert!(matches!(reserved.await.unwrap(), Reservation::Acquired(_)));
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore<C = PerThread<ConnectionManager>> {
    conn: C,
    pub(crate) prefix: String,
    pub(crate) op_timeout: Duration,
    /// Says which kind of deployment this is in `Debug` output, which leaves the connection out.
    topology: &'static str,
    /// Whether Redis takes `SET ... NX GET` (7.0 and later); when it refuses the syntax once,
    /// every replica of this store reserves with the script from then on.
    native_reserve: Arc<AtomicBool>,
    /// Which commands the server takes for fenced writes, and the records they compare.
    fencing: Arc<Fencing>,
    /// How inbox queues are split into shards and named (`inbox/keys.rs`).
    pub(crate) inbox: InboxLayout,
    /// Which shard the next inbox claim starts at.
    pub(crate) cursor: Arc<AtomicUsize>,
    /// Inbox shards whose last claim failed, passed over for a moment.
    pub(crate) resting: Arc<Resting>,
}

impl RedisStore<PerThread<ConnectionManager>> {
    /// Connects to `url` (`redis://` or `rediss://`); every key the store writes starts with
    /// `prefix`. Fails with `Unavailable` or `Timeout` when Redis cannot be reached within a few
    /// seconds, and with `Open` when the URL is not one.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let client = Client::open(url)
            // The client's error may quote the URL, password and all: only its redacted words
            // are kept, not the error itself (so too below).
            .map_err(|e| StoreError::open(redact(url, None, format!("invalid Redis URL: {e}"))))?;
        let password = client.get_connection_info().redis_settings().password();
        let password = password.map(str::to_owned);
        let connecting = ConnectionManager::new_with_config(client.clone(), manager_config());
        let conn = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => {
                let message = format!("cannot connect to Redis: {e}");
                let message = redact(url, password.as_deref(), message);
                return Err(StoreError::unavailable(message));
            }
            Err(_) => return Err(StoreError::Timeout(CONNECT_TIMEOUT)),
        };
        let connect: Connect<ConnectionManager> = Arc::new(move || {
            Box::pin(ConnectionManager::new_with_config(
                client.clone(),
                manager_config(),
            ))
        });
        Ok(Self::with_connection(
            PerThread::new(conn, connect),
            prefix,
            "single",
        ))
    }
}

impl<C: RedisConnection> RedisStore<C> {
    pub(crate) fn with_connection(conn: C, prefix: &str, topology: &'static str) -> Self {
        let inbox = match topology {
            "cluster" => InboxLayout::sharded(CLUSTER_SHARDS),
            _ => InboxLayout::SINGLE,
        };
        Self {
            conn,
            prefix: prefix.to_owned(),
            op_timeout: DEFAULT_OP_TIMEOUT,
            topology,
            native_reserve: Arc::new(AtomicBool::new(true)),
            fencing: Arc::default(),
            inbox,
            cursor: Arc::default(),
            resting: Arc::default(),
        }
    }

    /// Lays inbox queues out as on a cluster, `shards` per route, on any Redis: a store that
    /// may later move to a cluster keeps the layout it will have there. (A cluster store is
    /// sharded already.)
    pub fn with_inbox_shards(mut self, shards: u16) -> Self {
        self.inbox = InboxLayout::sharded(shards);
        self
    }

    /// Reserves with the script even where Redis takes `SET ... NX GET`, as on Redis before 7.0:
    /// for a server that claims a version its commands do not keep to.
    pub fn reserving_by_script(self) -> Self {
        self.native_reserve.store(false, Ordering::Relaxed);
        self
    }

    /// What the fenced writes (renewals, completions, releases) use, as learned from the server's
    /// answers so far.
    pub fn fence_commands(&self) -> FenceCommands {
        self.fencing.commands()
    }

    /// Bounds every operation, including any wait for a reconnect (default 2s).
    pub fn with_op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    fn key(&self, key: &ScopedKey) -> String {
        // Two calls per request: `concat` sizes the name and copies both parts, where
        // `format!` ran the formatting machinery for it.
        [self.prefix.as_str(), key.storage_key()].concat()
    }

    /// Runs one Redis call under the operation time-out, mapping its failures.
    pub(crate) async fn run<T, F>(&self, call: impl FnOnce(C) -> F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, RedisError>>,
    {
        self.run_within(self.op_timeout, call).await
    }

    /// Like `run`, bounded by `limit` instead of the operation time-out.
    pub(crate) async fn run_within<T, F>(
        &self,
        limit: Duration,
        call: impl FnOnce(C) -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, RedisError>>,
    {
        match tokio::time::timeout(limit, call(self.conn.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout(limit)),
            Ok(Err(e)) => Err(StoreError::unavailable_from("a Redis command failed", e)),
            Err(_) => Err(StoreError::Timeout(limit)),
        }
    }

    /// Undoes a reservation whose answer never came. A reserve that timed out may still reach
    /// Redis later (a stalled server carries on), and the key would then stay reserved for a
    /// whole lease although the client was told `503` and nothing ran. A fenced release sent
    /// right behind it on the same connection deletes the reservation whenever that runs; fenced
    /// by the token, it deletes only our own record. It is sent as `EVAL` with the script's
    /// source, not `EVALSHA`: nobody may be waiting for its answer by the time Redis runs it, so
    /// a `NOSCRIPT` would never be followed by the retry. It is best effort: if it cannot be
    /// sent either (Redis unreachable for longer), the record frees when its lease runs out.
    fn abandon(&self, key: &ScopedKey, token: FencingToken) {
        let store = self.clone();
        let holder = token.in_flight_prefix();
        let release = RELEASE.on(self.key(key), &[&holder]).by_source();
        let log_id = key.log_id();
        tokio::spawn(async move {
            let sent = store
                .run(|mut conn| async move { release.query_async::<i64>(&mut conn).await })
                .await;
            if let Err(e) = sent {
                tracing::debug!(key = %log_id, error = %ErrorChain(&e), "undoing an unanswered reservation failed; it frees when its lease runs out");
            }
        });
    }

    /// Makes a fenced write, natively where the server can (`fenced`).
    async fn fenced(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        write: FencedWrite<'_>,
    ) -> Result<Fenced, StoreError> {
        let (name, fencing) = (self.key(key), &*self.fencing);
        let held = fencing.held(token, write);
        let fenced = self
            .run(|mut conn| async move { fencing.write(&mut conn, name, token, held, write).await })
            .await?;
        if !matches!(write, FencedWrite::Renew { .. }) {
            fencing.forget(token);
        }
        Ok(fenced)
    }
}

impl<C> fmt::Debug for RedisStore<C> {
    // The connection is left out: its details include the URL, and with it any password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("topology", &self.topology)
            .field("prefix", &self.prefix)
            .field("op_timeout", &self.op_timeout)
            .field("fencing", &self.fencing.commands())
            .finish_non_exhaustive()
    }
}

/// Each connection attempt is bounded; a lost connection is retried a few times in the
/// background, and again on the next operation after that. Responses are bounded by the
/// operation time-out that every call runs under: a response time-out of the client's own would
/// only add a second timer to every command.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(None)
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_secs(1))
}

/// Removes the URL's password, as written and as decoded, from a message, in case a lower
/// layer echoed it back.
pub(crate) fn redact(url: &str, decoded: Option<&str>, mut message: String) -> String {
    let written = url
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password);
    for secret in [written, decoded].into_iter().flatten() {
        if !secret.is_empty() {
            message = message.replace(secret, "***");
        }
    }
    message
}

#[async_trait]
impl<C: RedisConnection> Store for RedisStore<C> {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        let (token, record) = InFlightRecord::fresh(fingerprint);
        let (encoded, lease) = (record.encode(), millis(lease));
        let name = self.key(key);
        let native = set_if_absent(&name, &encoded, &lease);
        let args: [&[u8]; 2] = [&encoded, lease.as_bytes()];
        let script = RESERVE.on(name, &args);
        let supported = &self.native_reserve;
        let reserve = |mut conn: C| async move {
            if supported.load(Ordering::Relaxed) {
                match native.query_async(&mut conn).await {
                    Err(e) if refused_syntax(&e) => supported.store(false, Ordering::Relaxed),
                    answer => return answer,
                }
            }
            script.run(&mut conn).await
        };
        let existing: Option<Vec<u8>> = match self.run(reserve).await {
            Ok(existing) => existing,
            Err(e) => {
                self.abandon(key, token);
                return Err(e);
            }
        };
        match existing {
            None => {
                self.fencing.hold(token, &encoded);
                Ok(Reservation::Acquired(token))
            }
            Some(raw) => Ok(decode(raw)?.into()),
        }
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        let lease = millis(lease);
        let write = FencedWrite::Renew { lease: &lease };
        self.fenced(key, token, write).await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let encoded = record.encode();
        let ttl = millis(ttl);
        let write = FencedWrite::Complete {
            encoded: &encoded,
            ttl: &ttl,
        };
        self.fenced(key, record.token, write).await
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        self.fenced(key, token, FencedWrite::Release).await
    }

    /// On a cluster a key of an inbox route has its record under a name of its own, looked
    /// at when the usual name has none.
    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let found = self.get_named(self.key(key)).await?;
        match self.inbox.tagged_record(&self.prefix, key) {
            Some(inbox) if found.is_none() => self.get_named(inbox).await,
            _ => Ok(found),
        }
    }

    /// On a cluster a key of an inbox route has its record under a name of its own (always
    /// completed), looked at when the usual name has none: two slots, so two commands.
    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        let removed = self.remove_named(self.key(key), removal).await?;
        match self.inbox.tagged_record(&self.prefix, key) {
            Some(inbox) if removed == Removed::Missing => self.remove_named(inbox, removal).await,
            _ => Ok(removed),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run(|mut conn| async move { redis::cmd("PING").query_async::<()>(&mut conn).await })
            .await
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        Some(self)
    }
}

impl<C: RedisConnection> RedisStore<C> {
    async fn get_named(&self, name: String) -> Result<Option<(Record, Duration)>, StoreError> {
        let call = GET.on(name, &[]);
        let found = self
            .run(|mut conn| async move { call.run(&mut conn).await })
            .await?;
        with_time_left(found)
    }

    async fn remove_named(&self, name: String, removal: Removal) -> Result<Removed, StoreError> {
        let forced: &[u8] = if removal == Removal::Forced {
            b"1"
        } else {
            b"0"
        };
        let args = [forced];
        let call = REMOVE.on(name, &args);
        let answer: i64 = self
            .run(|mut conn| async move { call.run(&mut conn).await })
            .await?;
        Ok(match answer {
            1 => Removed::Removed,
            -1 => Removed::KeptInFlight,
            _ => Removed::Missing,
        })
    }
}
