//! The types a [`Policy`](crate::Policy)'s settings are made of: where the key comes from,
//! what a duplicate gets, what an ambiguous outcome stores, how the body is fingerprinted
//! ([`jcs`], the canonical JSON of `fingerprint_body = "json"`), sizes, gRPC, and with the
//! `webhooks` feature the signature a route checks ([`Verifier`]).

pub use crate::grpc::{GrpcCode, Protocol};
pub use crate::idempotency::policy::{
    AmbiguousPolicy, ConcurrentPolicy, KeySource, RouteMode, StoreErrorPolicy,
};
#[cfg(feature = "webhooks")]
pub use crate::idempotency::verify::{Refusal, Scheme, Verifier, VerifierError, DEFAULT_TOLERANCE};
pub use crate::model::jcs::{JsonPointer, JsonPointerError};
pub use crate::model::FingerprintBody;
pub use crate::units::ByteSize;

/// RFC 8785 JSON canonicalization: what `fingerprint_body = "json"` fingerprints.
pub mod jcs {
    pub use crate::model::jcs::{
        canonicalize, try_canonicalize, JsonPointer, JsonPointerError, NotIJson, MAX_DEPTH,
    };
}
