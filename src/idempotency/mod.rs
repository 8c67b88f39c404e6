//! The idempotency machinery: keys, fingerprints, records, per-route policy, and the tower
//! layer that puts them together.
//!
//! The request path, in order: [`service`] admits a request (method, key, body limit,
//! fingerprint), reserves its scoped key in the store, and then either replays, refuses, or
//! hands it to [`execute`], which calls the upstream in a task of its own and records the outcome.

mod admit;
mod buffer;
mod cache;
mod deduplicate;
mod execute;
pub(crate) mod extract;
pub mod fingerprint;
pub mod key;
mod layer;
pub mod policy;
pub mod record;
mod replay;
mod service;
pub mod verify;
mod waiters;

use std::fmt;

pub use cache::ReplayCache;
pub use layer::IdempotencyLayer;
pub use policy::Policy;
pub use replay::IDEMPOTENT_REPLAYED;
pub use service::IdempotencyService;

/// An inner-service error meaning "the request never reached the upstream" (connection
/// refused, DNS failure). The layer then frees the key, so a retry runs the operation. Any
/// other error is treated as ambiguous: the operation may have run.
#[derive(Debug)]
pub struct RequestNotSent(pub crate::BoxError);

impl fmt::Display for RequestNotSent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request not sent: {}", self.0)
    }
}

impl std::error::Error for RequestNotSent {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}
