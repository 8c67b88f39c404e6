//! Where records live: the store contract (`api.rs`), the in-memory backend, and the
//! decorators that wrap any backend (encryption at rest, the local replay cache); `inbox.rs` is
//! the contract of inbox routes' queues, which a backend keeps beside its records.
//!
//! Nothing here knows about HTTP requests or the idempotency layer: stores trade only in the
//! shared vocabulary of `crate::model` (scoped keys, fingerprints, records). The durable
//! backends are crates of their own (`idempotency-file-store`, `idempotency-redis-store`), so a
//! service that uses one compiles only its client.

mod answers;
mod api;
mod caching;
mod digest_key;
mod inbox;
mod memory;
mod replay_cache;
#[cfg(feature = "sealing")]
mod sealed;

pub use api::{Fenced, Removal, Removed, Reservation, Store, StoreError};
pub use caching::CachingStore;
pub use inbox::{Acceptance, Claim, Inbox, Settlement};
pub use memory::MemoryStore;
pub use replay_cache::ReplayCache;
#[cfg(feature = "sealing")]
pub use sealed::{SealedStore, SealingKey, SealingKeyError, SealingKeyErrorKind, SealingKeys};
