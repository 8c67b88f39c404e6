//! Inbox queues through the sealing decorator: a delivery's key and request are sealed.
//!
//! The inner store keeps an envelope delivery: the same id, arrival, attempts and last
//! status and error (which the store updates as attempts end, and which say nothing secret),
//! the scoped key with its client key hashed, and in place of the request a `POST /` whose body
//! is the sealed encoding of the whole delivery. The associated data names the route and the
//! delivery id, so an envelope copied to another delivery fails to open. The acknowledgement
//! record is sealed as every completed record is.
//!
//! A claimed delivery that no configured key opens is made dead at once, with the reason as
//! its last error: it stays visible to an operator, and never blocks the queue.

use crate::error::ErrorChain;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use http::{HeaderMap, Method};

use super::SealedStore;
use crate::model::{
    AttemptFailure, CompletedRecord, Delivery, DeliveryId, InboxQueues, Record, RecordError,
    RouteName, ScopedKey, StoredRequest,
};
use crate::store::api::{Fenced, Store, StoreError};
use crate::store::inbox::{Acceptance, Claim, Inbox, Settlement};

fn unsupported() -> StoreError {
    StoreError::unavailable("the store behind the sealing keeps no inbox queues")
}

/// The associated data of a delivery's seal.
fn seal_name(queue: &RouteName, id: DeliveryId) -> String {
    format!("{queue}:delivery:{id}")
}

impl<S: Store + ?Sized> SealedStore<S> {
    fn inner_inbox(&self) -> Result<&dyn Inbox, StoreError> {
        self.inner.inbox().ok_or_else(unsupported)
    }

    fn seal_delivery(&self, delivery: &Delivery) -> Result<Delivery, StoreError> {
        let name = seal_name(delivery.key.route(), delivery.id);
        let sealed = self.seal_bytes(&name, &delivery.encode())?;
        let request = StoredRequest {
            method: Method::POST,
            target: "/".into(),
            headers: HeaderMap::new(),
            body: sealed,
        };
        Ok(Delivery {
            key: delivery.key.with_hashed_key(),
            request,
            ..delivery.clone()
        })
    }

    /// The delivery inside `envelope`, with the envelope's attempt state (the store's).
    fn open_delivery(
        &self,
        queue: &RouteName,
        envelope: &Delivery,
    ) -> Result<Delivery, StoreError> {
        let name = seal_name(queue, envelope.id);
        let plain = Delivery::decode(self.open_bytes(&name, &envelope.request.body)?)?;
        if plain.id != envelope.id {
            return Err(RecordError::new("sealed delivery does not match its envelope").into());
        }
        Ok(Delivery {
            key: plain.key,
            request: plain.request,
            ..envelope.clone()
        })
    }

    /// Opens a claim, or makes its delivery dead when it cannot be opened.
    async fn open_claim(
        &self,
        queue: &RouteName,
        claim: Claim,
    ) -> Result<Option<Claim>, StoreError> {
        match self.open_delivery(queue, &claim.delivery) {
            Ok(delivery) => Ok(Some(Claim { delivery, ..claim })),
            Err(e) => {
                tracing::warn!(route = %queue, delivery = %claim.delivery.id, error = %ErrorChain(&e), "inbox: a stored delivery cannot be opened; it is dead");
                let failure = AttemptFailure {
                    status: None,
                    error: Some(format!("cannot be opened: {e}")),
                };
                let dead = Settlement::Dead { failure };
                self.inner_inbox()?.settle(queue, &claim, &dead).await?;
                Ok(None)
            }
        }
    }
}

#[async_trait]
impl<S: Store + ?Sized> Inbox for SealedStore<S> {
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError> {
        let hidden = key.with_hashed_key();
        let ack = self.seal(hidden.storage_key(), ack)?;
        let delivery = self.seal_delivery(delivery)?;
        let inbox = self.inner_inbox()?;
        match inbox.accept(&hidden, &ack, &delivery, ttl).await? {
            Acceptance::Existing(Record::Completed(r)) => {
                let opened = self.open(hidden.storage_key(), &r)?;
                Ok(Acceptance::Existing(Record::Completed(opened)))
            }
            other => Ok(other),
        }
    }

    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let claims = self.inner_inbox()?.claim(queue, now, max, lease).await?;
        let mut opened = Vec::with_capacity(claims.len());
        for claim in claims {
            opened.extend(self.open_claim(queue, claim).await?);
        }
        Ok(opened)
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

    /// Dead deliveries opened where they can be; one that cannot is listed as its envelope,
    /// which says all the listing shows (id, attempts, last status and error, arrival).
    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        let dead = self.inner_inbox()?.dead(queue, limit, after).await?;
        let open = |d: Delivery| self.open_delivery(queue, &d).unwrap_or(d);
        Ok(dead.into_iter().map(open).collect())
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
