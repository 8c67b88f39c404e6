//! The idempotency layer: what a route promises ([`Policy`]), the public [`IdempotencyLayer`],
//! and the life of a request under it.
//!
//! Read it in the order a request goes: `service.rs` hands the request to `flow.rs`, which
//! admits it (`admit.rs`: key, body, fingerprint), reserves its key, and then runs it
//! (`execute.rs`), replays the stored answer (`replay.rs`), waits, or refuses. On an inbox
//! route it acknowledges and queues the request instead of running it (`accept.rs`).

mod accept;
mod admit;
mod buffer;
mod complete;
mod context;
mod detach;
mod execute;
mod extract;
mod flow;
mod inbox_hook;
mod layer;
pub(crate) mod metrics;
mod observer;
pub(crate) mod policy;
mod policy_builder;
mod replay;
mod service;
#[cfg(feature = "webhooks")]
pub(crate) mod verify;
mod waiters;

pub use context::{AnswerBody, Inner};
pub use inbox_hook::{InboxHook, StoredHeaders};
pub use layer::{IdempotencyLayer, LayerBuilder};
pub use metrics::RouteMetrics;
pub use observer::{FinishedRequest, NoObserver, RequestObserver};
pub use policy::{Policy, PolicyBuilder, PolicyError};
pub use service::{IdempotencyService, ResponseFuture};
