//! idempotency-proxy: a reverse proxy, and a `tower::Layer`, that makes unsafe HTTP requests
//! safe to retry.
//!
//! A client attaches an idempotency key; the first request with that key goes to the upstream,
//! its answer is stored, and every retry with the same key gets the stored answer. See
//! [`IdempotencyLayer`] for embedding it in a Rust service, and the README for running the proxy.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod config;
pub mod error;
pub mod framing;
#[doc(hidden)]
pub mod fuzzing;
mod headers;
pub mod idempotency;
pub mod jcs;
pub mod proxy;
pub mod router;
pub mod secret;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod units;
pub mod upstream;

pub use error::{ProblemBase, ProxyError};
pub use idempotency::{IdempotencyLayer, IdempotencyService, Policy};
pub use store::{Store, StoreError};

/// The boxed error inner services and bodies may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
