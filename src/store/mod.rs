//! Where records live: the store contract (`api.rs`), one file per backend, and the decorators
//! that wrap any backend (encryption at rest, the local replay cache); `inbox.rs` is the
//! contract of inbox routes' queues, which a backend keeps beside its records.
//!
//! Nothing here knows about HTTP requests or the idempotency layer: stores trade only in the
//! shared vocabulary of `crate::model` (scoped keys, fingerprints, records).

use std::sync::Arc;

mod answers;
mod api;
mod caching;
mod digest_key;
pub mod file;
mod inbox;
mod memory;
mod memory_entries;
mod memory_inbox;
pub mod redis;
mod redis_cluster;
mod redis_commands;
mod redis_inbox;
mod redis_inbox_keys;
mod redis_inbox_scripts;
mod redis_inbox_shard;
mod redis_per_thread;
mod redis_scripts;
mod replay_cache;
mod sealed;
mod spec;

pub use api::{Fenced, Removal, Removed, Reservation, Store, StoreError};
pub use caching::CachingStore;
pub use file::FileStore;
pub use inbox::{Acceptance, Claim, Inbox, Settlement};
pub use memory::MemoryStore;
pub use redis::{RedisConnection, RedisStore};
pub use redis_cluster::RedisClusterStore;
pub use replay_cache::ReplayCache;
pub use sealed::{SealedStore, SealingKey, SealingKeys};
pub use spec::{StoreSpec, StoreSpecError};

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
