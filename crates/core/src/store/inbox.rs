//! The inbox contract (docs/reference.md#inbox-routes): the [`Inbox`] trait a store implements when it can
//! hold inbox routes' queues beside their records.
//!
//! Like [`Store`](super::Store), it is small and object-safe, and every operation is one atomic
//! step in the backend. `accept` records the key and queues the delivery together, so an
//! acknowledged request is never a record without a delivery or the other way round. A queue is
//! named by its route. A delivery is *pending* (waiting for its due time), *in flight* (claimed:
//! its due time pushed a lease ahead, so a replica that dies mid-attempt only delays it), or
//! *dead* (out of attempts or age, kept for an operator). `claim` hands out a fencing token with
//! each delivery, and `settle` acts only while that claim is still the current one, so a replica
//! whose lease ran out and whose delivery was claimed again cannot overwrite the newer attempt's
//! state.
//!
//! Times are wall-clock and passed in by the caller (`now`), as queues outlive the process and
//! tests step over due times without waiting.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::answers::{Fenced, StoreError};
use crate::model::{
    AttemptFailure, CompletedRecord, Delivery, DeliveryId, FencingToken, InboxQueues, Record,
    RouteName, ScopedKey,
};

/// The answer to `accept`.
// Like `Reservation`, answered once per request and taken apart at once: boxing the record
// would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acceptance {
    /// The key was new: the acknowledgement is recorded and the delivery queued, due now.
    Queued,
    /// The key has a record already (the acknowledgement of an earlier request, or a record
    /// the route made before it became an inbox); nothing was written.
    Existing(Record),
}

/// A delivery handed out by `claim`, and the token its settlement must present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The delivery, with `attempts` counting the attempt this claim is for.
    pub delivery: Delivery,
    /// The claim's fencing token.
    pub token: FencingToken,
}

/// How an attempt ended, as `settle` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The upstream took it: the delivery is gone from the queue.
    Delivered,
    /// It failed, and is due again at `due`.
    Retry {
        /// When the next attempt may start.
        due: SystemTime,
        /// What the attempt came to.
        failure: AttemptFailure,
    },
    /// It failed for the last time: the delivery is dead, kept for an operator.
    Dead {
        /// What the last attempt came to.
        failure: AttemptFailure,
    },
}

/// The queues of inbox routes, kept by a store beside its records.
#[async_trait]
pub trait Inbox: Send + Sync + 'static {
    /// Atomically records `ack` under `key` (living for `ttl`) and queues `delivery` in the
    /// queue of `key`'s route, due at its `received_at`; or, when `key` has a live record
    /// already, returns it and writes nothing.
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError>;

    /// Takes up to `max` deliveries of `queue` due by `now`, earliest due first: each is due
    /// again at `now + lease`, carries a fresh claim token and counts one more attempt.
    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError>;

    /// Records how the attempt of `claim` ended, if the claim is still the current one. Only
    /// the claim's delivery id and token are read; the stored delivery keeps its own request.
    async fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError>;

    /// Counts `queue`'s deliveries as of `now`.
    async fn queues(&self, queue: &RouteName, now: SystemTime) -> Result<InboxQueues, StoreError>;

    /// Up to `limit` dead deliveries of `queue` in id order, starting after `after`.
    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Makes a dead delivery pending again, due at `now`, with a fresh attempt budget (its
    /// attempts count from zero). Returns whether it was dead.
    async fn retry_dead(
        &self,
        queue: &RouteName,
        id: DeliveryId,
        now: SystemTime,
    ) -> Result<bool, StoreError>;

    /// Deletes a dead delivery. Returns whether it was dead.
    async fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> Result<bool, StoreError>;
}
