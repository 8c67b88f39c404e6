//! A [`Store`] decorator that answers replays from memory, so a replay costs no store round
//! trip.
//!
//! A completed record changes only by expiring or by an operator's `DELETE`, so a copy is safe
//! to serve for a short while: each copy is served for `fresh_for` after it was stored (the
//! route's `replay_cache_ttl`), never longer, however often it is hit, and never past the
//! record's own expiry. A `remove` through this store drops the copy at once; one made on
//! another replica is seen here within `fresh_for`. Several `CachingStore`s (one per route) may
//! share one [`ReplayCache`] and its byte budget.
//!
//! It wraps the sealing decorator, not the other way round: the copies are of opened records,
//! so a replay from memory costs no decryption either.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::api::{Fenced, Removal, Removed, Reservation, Store, StoreError};
use super::inbox::Inbox;
use super::replay_cache::ReplayCache;
use crate::model::{CompletedRecord, FencingToken, Fingerprint, Record, ScopedKey};

/// Any store, with completed records copied into a shared in-memory cache for a short while.
#[derive(Debug)]
pub struct CachingStore<S: ?Sized = dyn Store> {
    pub(super) inner: Arc<S>,
    cache: Arc<ReplayCache>,
    /// How long a copy is served after it was stored; zero turns the cache off.
    fresh_for: Duration,
    /// How long the records behind these keys live (the route's `ttl`), for copies of records
    /// read back from the store: a copy never outlives its record.
    record_ttl: Duration,
}

impl<S: Store + ?Sized> CachingStore<S> {
    /// `inner`, with copies in `cache` served for `fresh_for` after they are stored, for
    /// records that live `record_ttl` in `inner`.
    pub fn new(
        inner: Arc<S>,
        cache: Arc<ReplayCache>,
        fresh_for: Duration,
        record_ttl: Duration,
    ) -> Self {
        Self {
            inner,
            cache,
            fresh_for,
            record_ttl,
        }
    }

    /// Copies `record`, which has `left` to live in the store behind.
    fn remember(&self, key: &ScopedKey, record: &CompletedRecord, left: Duration) {
        if !self.fresh_for.is_zero() {
            let fresh_for = self.fresh_for;
            self.cache
                .insert(*key.name_digest(), record, fresh_for, left);
        }
    }

    fn cached(&self, key: &ScopedKey) -> Option<CompletedRecord> {
        if self.fresh_for.is_zero() {
            return None;
        }
        self.cache.get(key.name_digest())
    }
}

#[async_trait]
impl<S: Store + ?Sized> Store for CachingStore<S> {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        if let Some(record) = self.cached(key) {
            return Ok(Reservation::Completed(record));
        }
        let reservation = self.inner.reserve(key, fingerprint, lease).await?;
        if let Reservation::Completed(record) = &reservation {
            let expires = record.created_at + self.record_ttl;
            let left = expires
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            self.remember(key, record, left);
        }
        Ok(reservation)
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        self.inner.renew(key, token, lease).await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let fenced = self.inner.complete(key, record, ttl).await?;
        if fenced == Fenced::Applied {
            self.remember(key, record, ttl);
        }
        Ok(fenced)
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        self.inner.release(key, token).await
    }

    /// Always the store's own answer: an operator inspecting a record sees what is stored.
    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        self.inner.get(key).await
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        self.cache.invalidate(key.name_digest());
        self.inner.remove(key, removal).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    /// The inbox of the store behind, as it is: nothing of a queue is copied (deliveries change
    /// with every attempt, on any replica), and neither are the acknowledgements `accept`
    /// writes (a duplicate of an inbox request is rare; its replay comes from the store).
    fn inbox(&self) -> Option<&dyn Inbox> {
        self.inner.inbox()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};

    use super::*;
    use crate::model::{IdempotencyKey, RouteName, StoredBody};
    use crate::store::MemoryStore;

    const DAY: Duration = Duration::from_secs(86_400);
    const LEASE: Duration = Duration::from_secs(30);

    fn key() -> ScopedKey {
        let key = IdempotencyKey::new("k").unwrap();
        ScopedKey::new(RouteName::new("r").unwrap(), None, key)
    }

    /// A store over `inner` whose copies are fresh for one second, with one completed record.
    async fn cached_over(inner: Arc<MemoryStore>) -> CachingStore<MemoryStore> {
        let cache = Arc::new(ReplayCache::new(1 << 20));
        let store = CachingStore::new(inner, cache, Duration::from_secs(1), DAY);
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        let Ok(Reservation::Acquired(token)) = store.reserve(&key(), fingerprint, LEASE).await
        else {
            panic!("a fresh key is acquired")
        };
        let record = CompletedRecord {
            fingerprint,
            token,
            created_at: SystemTime::now(),
            status: StatusCode::CREATED,
            headers: HeaderMap::new(),
            body: StoredBody::Kept(Bytes::from_static(b"done")),
        };
        let completed = store.complete(&key(), &record, DAY).await.unwrap();
        assert_eq!(completed, Fenced::Applied);
        store
    }

    async fn reserve(store: &dyn Store) -> Reservation {
        let fingerprint = Fingerprint::from_bytes([1; 32]);
        store.reserve(&key(), fingerprint, LEASE).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn hits_never_extend_a_copy_past_its_time() {
        let inner = Arc::new(MemoryStore::new());
        let store = cached_over(inner.clone()).await;
        // Another replica drops the record: only the store behind this one sees it.
        assert_eq!(
            inner.remove(&key(), Removal::Forced).await.unwrap(),
            Removed::Removed
        );
        for _ in 0..3 {
            tokio::time::advance(Duration::from_millis(300)).await;
            assert!(matches!(reserve(&store).await, Reservation::Completed(_)));
        }
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(
            matches!(reserve(&store).await, Reservation::Acquired(_)),
            "a copy hit every 300ms is still gone one second after it was stored"
        );
    }

    #[tokio::test]
    async fn a_remove_through_it_drops_the_copy_at_once() {
        let inner = Arc::new(MemoryStore::new());
        let store = cached_over(inner.clone()).await;
        assert!(matches!(reserve(&store).await, Reservation::Completed(_)));
        assert_eq!(
            store.remove(&key(), Removal::Forced).await.unwrap(),
            Removed::Removed
        );
        assert!(matches!(reserve(&store).await, Reservation::Acquired(_)));
    }

    #[tokio::test]
    async fn replays_come_from_memory_until_then() {
        let inner = Arc::new(MemoryStore::new());
        let store = cached_over(inner.clone()).await;
        assert_eq!(
            inner.remove(&key(), Removal::Forced).await.unwrap(),
            Removed::Removed
        );
        let Reservation::Completed(copy) = reserve(&store).await else {
            panic!("the copy answers")
        };
        assert_eq!(copy.body, StoredBody::Kept(Bytes::from_static(b"done")));
    }
}
