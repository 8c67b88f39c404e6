//! The store suite over the file store.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idempotency_core::backend::{CompletedRecord, FencingToken, Fingerprint, Record, ScopedKey};
use idempotency_core::{
    backend::{Fenced, Inbox, Removal, Removed, Reservation},
    Store, StoreError,
};
use idempotency_file_store::FileStore;
use idempotency_test_support::temp::TempPath;
use idempotency_test_support::{inbox_suite, store_suite};

/// A fresh store per test, so cases never see each other's records, removed with its log when
/// the test drops it.
async fn file(test: &str) -> Option<Arc<dyn Store>> {
    let path = TempPath::new(&format!("{test}.redb"));
    let store = FileStore::open(path.path()).unwrap();
    Some(Arc::new(Scratch(store, path)))
}

/// A file store and its path, held until the test is done: the store closes before the path is
/// removed (fields drop in order).
struct Scratch(FileStore, #[allow(dead_code)] TempPath);

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[async_trait]
impl Store for Scratch {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        self.0.reserve(key, fingerprint, lease).await
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        self.0.renew(key, token, lease).await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        self.0.complete(key, record, ttl).await
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        self.0.release(key, token).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        self.0.get(key).await
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        self.0.remove(key, removal).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        self.0.inbox()
    }
}

store_suite!(file);
inbox_suite!(file_inbox => file);
