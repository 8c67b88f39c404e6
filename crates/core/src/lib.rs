//! The idempotency layer for tower services, and the vocabulary its stores share.
//!
//! A client attaches an idempotency key; the first request with that key goes to the service,
//! its answer is stored, and every retry with the same key gets the stored answer, so the
//! operation runs once whatever the network did.
//!
//! - [`IdempotencyLayer`] wraps a service; a [`Policy`] (built with [`Policy::builder`]) says
//!   what it covers; [`ProblemLayer`] outside it renders the layer's own answers as
//!   `application/problem+json`.
//! - [`store::Store`] is where records live: [`store::MemoryStore`] here, the durable stores in
//!   their own crates (`idempotency-file-store`, `idempotency-redis-store`), and decorators that
//!   wrap any of them ([`store::SealedStore`] for encryption at rest, [`store::CachingStore`]).
//! - [`model`] is the vocabulary the layer and the stores share: keys, fingerprints, records.
//!
//! ```
//! use std::sync::Arc;
//! use idempotency_core::model::RouteName;
//! use idempotency_core::store::MemoryStore;
//! use idempotency_core::{IdempotencyLayer, Policy};
//!
//! let policy = Policy::builder(RouteName::new("payments").unwrap())
//!     .with_require_key(true)
//!     .build()
//!     .unwrap();
//! let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy).unwrap();
//! # let _ = layer;
//! ```
#![forbid(unsafe_code)]

pub mod backoff;
pub mod error;
pub mod grpc;
#[doc(hidden)]
pub mod headers;
pub mod idempotency;
pub mod model;
pub mod outcome;
pub mod problem;
pub mod secret;
pub mod signing;
pub mod store;
pub mod units;

pub use error::{BoxError, ProxyError};
pub use idempotency::{IdempotencyLayer, IdempotencyService, Policy, PolicyError};
pub use problem::{ProblemBase, ProblemLayer, ProblemService};
pub use secret::Secret;
pub use store::{Store, StoreError};
