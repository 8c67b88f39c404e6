//! The idempotency machinery: keys, fingerprints, records, per-route policy, and the tower
//! layer that puts them together.

pub mod fingerprint;
pub mod key;
pub mod policy;
pub mod record;
