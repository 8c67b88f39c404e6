//! The store suite over the file store.

use std::sync::Arc;

use idempotency_core::store::Store;
use idempotency_file_store::FileStore;
use idempotency_test_support::temp::TempPath;
use idempotency_test_support::{inbox_suite, store_suite};

/// A fresh database file per test, so cases never see each other's records. The path is unlinked
/// once open: the store keeps its handle, and nothing is left behind in the temp directory.
async fn file(test: &str) -> Option<Arc<dyn Store>> {
    let path = TempPath::new(&format!("{test}.redb"));
    Some(Arc::new(FileStore::open(path.path()).unwrap()))
}

store_suite!(file);
inbox_suite!(file_inbox => file);
