//! The stores the proxy can open: the choice an operator names (`spec.rs`: `memory`,
//! `file:PATH`, `redis://`, `redis+cluster://`, `postgres://`), the Postgres store's own keys
//! (`postgres.rs`), and every store type, from the core and the store crates, under one name
//! for the rest of the proxy.

use std::sync::Arc;

mod postgres;
mod spec;

pub use idempotency_core::backend::{
    Acceptance, CachingStore, Claim, Fenced, Inbox, Removal, Removed, ReplayCache, Reservation,
    SealedStore, SealingKey, SealingKeys, Settlement,
};
pub use idempotency_core::{MemoryStore, Store, StoreError};
pub use idempotency_file_store::FileStore;
pub use idempotency_redis_store::{RedisClusterStore, RedisConnection, RedisStore, DEFAULT_PREFIX};
pub use postgres::{DatabaseCa, PostgresSettings, PostgresStore};
pub use spec::{StoreSpec, StoreSpecError};

/// Opens the store a spec names, a Postgres store with its keys' defaults.
pub async fn open(spec: &StoreSpec) -> Result<Arc<dyn Store>, StoreError> {
    open_with(spec, &PostgresSettings::default()).await
}

/// Opens the store a spec names; `postgres` holds the Postgres store's own keys.
pub async fn open_with(
    spec: &StoreSpec,
    postgres: &PostgresSettings,
) -> Result<Arc<dyn Store>, StoreError> {
    match spec {
        StoreSpec::Postgres(value) => Ok(Arc::new(postgres::open(value, postgres).await?)),
        StoreSpec::Memory => Ok(Arc::new(MemoryStore::new())),
        StoreSpec::Redis(url) => Ok(Arc::new(RedisStore::connect(url, DEFAULT_PREFIX).await?)),
        StoreSpec::RedisCluster(nodes) => Ok(Arc::new(
            RedisStore::connect_cluster(nodes, DEFAULT_PREFIX).await?,
        )),
        StoreSpec::File(path) => {
            let path = path.clone();
            let opened = tokio::task::spawn_blocking(move || FileStore::open(&path)).await;
            let store = opened.map_err(|e| StoreError::open_from("file store", e))??;
            Ok(Arc::new(store))
        }
    }
}
