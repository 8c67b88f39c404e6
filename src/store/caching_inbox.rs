//! Inbox queues through the replay cache: every operation goes to the store behind.
//!
//! Nothing of a queue is copied: deliveries change with every attempt, and another replica
//! may claim, settle or revive them at any time. The acknowledgement records `accept` writes
//! are not copied either; a duplicate of an inbox request is rare, and its replay comes from
//! the store like any record's first read.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::api::{Fenced, Store, StoreError};
use super::caching::CachingStore;
use super::inbox::{Acceptance, Claim, Inbox, Settlement};
use crate::model::{CompletedRecord, Delivery, DeliveryId, InboxQueues, RouteName, ScopedKey};

impl<S: Store + ?Sized> CachingStore<S> {
    fn inner_inbox(&self) -> Result<&dyn Inbox, StoreError> {
        self.inner.inbox().ok_or_else(|| {
            StoreError::Unavailable("the store behind the replay cache keeps no inbox".into())
        })
    }
}

#[async_trait]
impl<S: Store + ?Sized> Inbox for CachingStore<S> {
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError> {
        let inbox = self.inner_inbox()?;
        inbox.accept(key, ack, delivery, ttl).await
    }

    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        self.inner_inbox()?.claim(queue, now, max, lease).await
    }

    async fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        self.inner_inbox()?.settle(queue, claim, settlement).await
    }

    async fn queues(&self, queue: &RouteName, now: SystemTime) -> Result<InboxQueues, StoreError> {
        self.inner_inbox()?.queues(queue, now).await
    }

    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.inner_inbox()?.dead(queue, limit, after).await
    }

    async fn retry_dead(
        &self,
        queue: &RouteName,
        id: DeliveryId,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        self.inner_inbox()?.retry_dead(queue, id, now).await
    }

    async fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> Result<bool, StoreError> {
        self.inner_inbox()?.remove_dead(queue, id).await
    }
}
