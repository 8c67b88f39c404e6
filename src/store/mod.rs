//! Where records live: the store trait and its backends.
//!
//! The trait is small and object-safe so a proxy can pick a backend at start-up and a test suite
//! can run the same cases against every one (`tests/store_suite.rs`). Each operation is one
//! atomic step in the backend: `reserve` never reads and then writes, and `complete`, `renew`
//! and `release` only act while the caller's fencing token is still the current one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::idempotency::fingerprint::Fingerprint;
use crate::idempotency::key::ScopedKey;
use crate::idempotency::record::{
    CompletedRecord, FencingToken, InFlightRecord, Record, RecordError,
};

pub mod file;
pub mod memory;
pub mod redis;
mod redis_cluster;
mod redis_scripts;
pub mod sealed;
mod spec;

pub use file::FileStore;
pub use memory::MemoryStore;
pub use redis::{RedisConnection, RedisStore};
pub use redis_cluster::RedisClusterStore;
pub use sealed::{SealedStore, SealingKey, SealingKeys};

pub use spec::{StoreSpec, StoreSpecError};

/// What can go wrong talking to a store. None of it reaches a client beyond `store-unavailable`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unreachable: {0}")]
    Unavailable(String),
    #[error("store operation timed out after {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Corrupt(#[from] RecordError),
    #[error("cannot open store: {0}")]
    Open(String),
}

/// The answer to `reserve`: the key is ours now, or what was already there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// Nothing was there; an in-flight record with this token now is.
    Acquired(FencingToken),
    /// Another request holds the key and its outcome is not known yet.
    InFlight(InFlightRecord),
    /// The key has a stored outcome.
    Completed(CompletedRecord),
}

impl From<Record> for Reservation {
    fn from(record: Record) -> Self {
        match record {
            Record::InFlight(r) => Reservation::InFlight(r),
            Record::Completed(r) => Reservation::Completed(r),
        }
    }
}

/// Whether a fenced write (`complete`, `renew`, `release`) found its reservation still current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    Applied,
    /// The lease ran out and the key was freed or taken over; nothing was written.
    LeaseLost,
}

#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Atomically creates an in-flight record living for `lease`, or returns the existing one.
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError>;

    /// Extends the lease of the in-flight record held by `token`.
    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError>;

    /// Replaces the in-flight record held by `token` with the outcome, living for `ttl`.
    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError>;

    /// Deletes the in-flight record held by `token`, so a retry runs again.
    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError>;

    /// Reads a record and how long it has left, for operators and waiting duplicates.
    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError>;

    /// Deletes a record whatever its state (an operator's decision). Returns whether one existed.
    async fn remove(&self, key: &ScopedKey) -> Result<bool, StoreError>;

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;
}

/// Opens the store a spec names.
pub async fn open(spec: &StoreSpec) -> Result<Arc<dyn Store>, StoreError> {
    match spec {
        StoreSpec::Memory => Ok(Arc::new(MemoryStore::new())),
        StoreSpec::Redis(url) => Ok(Arc::new(
            RedisStore::connect(url, redis::DEFAULT_PREFIX).await?,
        )),
        StoreSpec::RedisCluster(nodes) => Ok(Arc::new(
            RedisStore::connect_cluster(nodes, redis::DEFAULT_PREFIX).await?,
        )),
        StoreSpec::File(path) => {
            let path = path.clone();
            let opened = tokio::task::spawn_blocking(move || FileStore::open(&path)).await;
            let store = opened.map_err(|e| StoreError::Open(format!("file store: {e}")))??;
            Ok(Arc::new(store))
        }
    }
}
