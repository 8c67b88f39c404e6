//! The stores an operator names open as the store they name.

use crate::common;

use idempotency_proxy::store::{StoreSpec, DEFAULT_PREFIX};

#[tokio::test]
async fn redis_urls_open_a_redis_store() {
    if common::redis::connection().await.is_none() {
        return;
    }
    let spec: StoreSpec = common::redis::url().parse().unwrap();
    let store = idempotency_proxy::store::open(&spec).await.unwrap();
    store.ping().await.unwrap();
    assert!(format!("{store:?}").contains(DEFAULT_PREFIX));
}

#[tokio::test]
async fn a_file_spec_opens_the_file_store_and_memory_the_memory_store() {
    let path = common::temp::TempPath::new("stores-file.redb");
    let spec: StoreSpec = format!("file:{}", path.path().display()).parse().unwrap();
    let file = idempotency_proxy::store::open(&spec).await.unwrap();
    file.ping().await.unwrap();
    assert!(format!("{file:?}").contains("FileStore"), "{file:?}");
    assert!(path.path().exists());
    let memory = idempotency_proxy::store::open(&StoreSpec::Memory)
        .await
        .unwrap();
    assert!(format!("{memory:?}").contains("MemoryStore"), "{memory:?}");
}
