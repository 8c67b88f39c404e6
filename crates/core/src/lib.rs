//! The idempotency layer for tower services, and the vocabulary its stores share.
//!
//! A client attaches an idempotency key; the first request with that key goes to the service,
//! its answer is stored, and every retry with the same key gets the stored answer, so the
//! operation runs once whatever the network did.
//!
//! What a service uses is here, at the root:
//!
//! - [`IdempotencyLayer`] wraps a service; a [`Policy`] (built with [`Policy::builder`], the one
//!   step that can fail) says what it covers. The layer answers its own refusals (`409`, `422`,
//!   ...) as `application/problem+json`: a [`Problem`] rendered with a [`ProblemBase`].
//! - [`Store`] is where records live: [`MemoryStore`] here, the durable stores in their own
//!   crates (`idempotency-file-store`, `idempotency-redis-store`).
//! - [`ProblemLayer`], outermost, renders the [`Problem`]s of the rest of a stack the same way.
//!
//! The rest is in four modules: [`policy`] (the types a policy's settings are made of),
//! [`observe`] (what the layer tells a watcher about each request), [`backend`] (what a store
//! author implements and the records a store keeps) and [`proxy`] (hooks for the
//! `idempotency-proxy` crates, not for services).
//!
//! ```
//! use std::sync::Arc;
//! use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
//!
//! let policy = Policy::builder("payments").with_require_key(true).build().unwrap();
//! let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy);
//! # let _ = layer;
//! ```
//!
//! Cargo features, both on by default: `sealing` (encryption at rest,
//! [`backend::SealedStore`]) and `webhooks` (signed webhooks: [`policy::Verifier`]).
//!
//! [`Secret`] comes from `idempotency-delivery`, the crate the layer shares with the outbox
//! relay (secrets, retry backoff, webhook signing).
#![forbid(unsafe_code)]

mod error;
mod grpc;
mod headers;
mod idempotency;
mod model;
mod outcome;
mod problem;
mod store;
mod units;

pub mod backend;
pub mod observe;
pub mod policy;
pub mod proxy;

pub use error::{BoxError, Problem, ProblemMeta, RequestNotSent};
pub use idempotency::{IdempotencyLayer, IdempotencyService, LayerBuilder, ResponseFuture};
pub use idempotency::{Policy, PolicyBuilder, PolicyError};
pub use idempotency_delivery::{Secret, SecretError};
pub use problem::{ProblemBase, ProblemBaseError, ProblemLayer, ProblemService, ProblemType};
pub use store::{MemoryStore, Store, StoreError};

/// The README's example, compiled and run as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
