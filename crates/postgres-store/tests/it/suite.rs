//! The store suite over Postgres: the store itself, encryption at rest over it, and the replay
//! cache in front of it. Each case gets a schema of its own (`store_schema`) on the test
//! binary's private PostgreSQL; without PostgreSQL's programs the cases report `SKIPPED`, unless
//! `REQUIRE_POSTGRES=1`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    backend::{CachingStore, ReplayCache, SealedStore},
    Store,
};
use idempotency_postgres::{ConnectOptions, DatabaseUrl};
use idempotency_postgres_store::PostgresStore;
use idempotency_test_support::postgres_server::shared_postgres;
use idempotency_test_support::records::sealing_keys;
use idempotency_test_support::suite::LONG;
use idempotency_test_support::{inbox_suite, store_suite};

type Backend = Option<Arc<dyn Store>>;

/// A store in a schema of its own on the shared server.
async fn store() -> Option<PostgresStore> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Starting the server blocks for a moment, once; the runtime is multi-threaded.
    let server = tokio::task::block_in_place(shared_postgres)?;
    let url = DatabaseUrl::resolve(&server.url()).unwrap();
    let schema = format!("suite_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let options = ConnectOptions {
        pool_size: 8,
        ..ConnectOptions::default()
    };
    let store = PostgresStore::connect(&url, &options, Some(&schema)).await;
    Some(store.unwrap_or_else(|e| panic!("the test server is up but the store cannot open: {e}")))
}

async fn postgres(_test: &str) -> Backend {
    Some(Arc::new(store().await?))
}

/// Encryption at rest over Postgres: sealed records and deliveries, records under hashed keys.
async fn sealed_postgres(test: &str) -> Backend {
    let store = store().await?;
    Some(Arc::new(SealedStore::new(
        Arc::new(store),
        sealing_keys(test),
    )))
}

/// The replay cache in front of Postgres, serving copies for longer than any case runs.
async fn cached_postgres(_test: &str) -> Backend {
    let cache = Arc::new(ReplayCache::new(1 << 24));
    let inner = Arc::new(store().await?);
    let store = CachingStore::new(inner, cache, Duration::from_secs(60), LONG);
    Some(Arc::new(store))
}

store_suite!(postgres);
store_suite!(sealed_postgres);
store_suite!(cached_postgres);

inbox_suite!(postgres_inbox => postgres);
inbox_suite!(sealed_postgres_inbox => sealed_postgres);
inbox_suite!(cached_postgres_inbox => cached_postgres);
