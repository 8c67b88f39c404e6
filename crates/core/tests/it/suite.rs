//! The store suite over the memory store and the decorators that wrap any store: every case
//! must hold through encryption at rest and with copies answered from the replay cache.

use std::sync::Arc;
use std::time::Duration;

use idempotency_core::{
    backend::{CachingStore, ReplayCache, SealedStore},
    MemoryStore, Store,
};
use idempotency_test_support::records::sealing_keys;
use idempotency_test_support::suite::LONG;
use idempotency_test_support::{inbox_suite, store_suite};

type Backend = Option<Arc<dyn Store>>;

async fn memory(_test: &str) -> Backend {
    Some(Arc::new(MemoryStore::new()))
}

/// Encryption at rest over the memory store: every case holds through sealing and opening.
async fn sealed(test: &str) -> Backend {
    let store = SealedStore::new(Arc::new(MemoryStore::new()), sealing_keys(test));
    Some(Arc::new(store))
}

/// The replay cache in front of the memory store, serving copies for longer than any case runs:
/// every case must hold with copies answered from memory too.
async fn cached(_test: &str) -> Backend {
    let cache = Arc::new(ReplayCache::new(1 << 24));
    let inner = Arc::new(MemoryStore::new());
    let store = CachingStore::new(inner, cache, Duration::from_secs(60), LONG);
    Some(Arc::new(store))
}

store_suite!(memory);
store_suite!(sealed);
store_suite!(cached);

inbox_suite!(memory_inbox => memory);
inbox_suite!(sealed_inbox => sealed);
inbox_suite!(cached_inbox => cached);
