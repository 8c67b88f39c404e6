//! What a store author needs: the [`Store`] and [`Inbox`] traits with what their methods take
//! and answer, and the vocabulary a store keeps (scoped keys, fingerprints, fencing tokens,
//! records and their byte encoding, inbox deliveries); and the decorators that wrap any store
//! ([`CachingStore`] over a [`ReplayCache`], and with the `sealing` feature [`SealedStore`] for
//! encryption at rest).
//!
//! A store is handed encoded records and gives them back byte for byte: it needs to read no
//! more of a record than [`Record::encode`] and [`Record::decode`] give it, and to know nothing
//! of HTTP. `idempotency-test-support`'s store suite is the contract's test: every backend runs
//! it.

pub use crate::model::{
    now_millis, unix_millis, AttemptFailure, BadDeliveryId, ClientScope, CompletedRecord, Delivery,
    DeliveryId, FencingToken, Fingerprint, IdempotencyKey, InFlightRecord, InboxQueues, KeyError,
    LogId, Part, PartDigests, Record, RecordError, RouteName, RouteNameError, ScopedKey,
    StoredBody, StoredRequest, MAX_ERROR_LEN, MAX_KEY_LEN,
};
pub use crate::store::{
    Acceptance, CachingStore, Claim, Fenced, Inbox, Removal, Removed, ReplayCache, Reservation,
    Settlement, Store, StoreError,
};
#[cfg(feature = "sealing")]
pub use crate::store::{
    SealedStore, SealingKey, SealingKeyError, SealingKeyErrorKind, SealingKeys,
};
