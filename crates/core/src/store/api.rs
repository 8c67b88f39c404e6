//! The store's contract: the [`Store`] trait every backend and decorator implements, what its
//! operations answer, and how they fail.
//!
//! The trait is small and object-safe so a proxy can pick a backend at start-up and a test suite
//! can run the same cases against every one (the test-support crate's `store_suite!`). Each
//! operation is one atomic step in the backend: `reserve` never reads and then writes, and
//! `complete`, `renew` and `release` only act while the caller's fencing token is still the
//! current one.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

pub use super::answers::{Fenced, StoreError};
use super::inbox::Inbox;

use crate::model::{CompletedRecord, FencingToken, Fingerprint, InFlightRecord, Record, ScopedKey};

/// The answer to `reserve`: the key is ours now, or what was already there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// Nothing was there; an in-flight record with this token now is.
    Acquired(FencingToken),
    /// Another request holds the key and its outcome is not known yet.
    InFlight(InFlightRecord),
    /// The key has a stored outcome.
    Completed(CompletedRecord),
}

impl From<Record> for Reservation {
    fn from(record: Record) -> Self {
        match record {
            Record::InFlight(r) => Reservation::InFlight(r),
            Record::Completed(r) => Reservation::Completed(r),
        }
    }
}

/// What an operator's removal may drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Only a completed record. Dropping an in-flight one would let a retry run the operation
    /// again while the first run is still going.
    CompletedOnly,
    /// Whatever is there (`?force=true`): the operator knows the first run is gone.
    Forced,
}

/// What `remove` did, decided in the same atomic step that removed (or kept) the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// A record was there and is gone.
    Removed,
    /// Nothing was there.
    Missing,
    /// An in-flight record was there and was kept ([`Removal::CompletedOnly`]).
    KeptInFlight,
}

/// Where records live. Every operation is one atomic step in the backend.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Atomically creates an in-flight record living for `lease`, or returns the existing one.
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError>;

    /// Extends the lease of the in-flight record held by `token`.
    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError>;

    /// Replaces the in-flight record held by `token` with the outcome, living for `ttl`.
    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError>;

    /// Deletes the in-flight record held by `token`, so a retry runs again.
    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError>;

    /// Reads a record and how long it has left, for operators and waiting duplicates.
    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError>;

    /// Deletes a record on an operator's word: a completed one always, an in-flight one only
    /// when the removal is [`Removal::Forced`].
    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError>;

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The same store's inbox queues, where it can keep them (docs/reference.md#inbox-routes). Decorators
    /// answer for themselves when what they wrap can, so inbox operations pass through them.
    fn inbox(&self) -> Option<&dyn Inbox> {
        None
    }
}
