//! What the senders of the idempotency crates share: the layer (`idempotency-core`, whose
//! inbox routes retry deliveries and check signed webhooks), the outbox relay (which retries
//! and signs what it sends) and the PostgreSQL connection crate (whose URL may be a secret).
//! Each uses this crate without depending on the others.
//!
//! - [`Secret`]: a secret named by reference (`env:NAME` or `file:PATH`), never inline.
//! - [`backoff`]: exponential backoff with full jitter.
//! - [`signing`] (feature `signing`, on by default): Standard Webhooks signatures.
//! - [`fractional_seconds`]: how an age is written for operators.
#![forbid(unsafe_code)]

pub mod backoff;
mod secret;
#[cfg(feature = "signing")]
pub mod signing;
mod time;

pub use secret::{Secret, SecretError};
pub use time::fractional_seconds;

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
