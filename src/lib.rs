//! idempotency-proxy: a reverse proxy that makes unsafe HTTP requests safe to retry.
//!
//! A client attaches an idempotency key; the first request with that key goes to the upstream,
//! its answer is stored, and every retry with the same key gets the stored answer.
//!
//! The layer that does it, its vocabulary and the memory store are the `idempotency-core`
//! crate; the durable stores are `idempotency-file-store` and `idempotency-redis-store`. This
//! crate is the proxy around them: [`Proxy`] serves what a [`config::Settings`] describes, and
//! the binary is [`run_command_line`]. A Rust service that wants only the layer depends on
//! `idempotency-core` (and a store crate), not on this one.
//!
//! The folders are its layers (ARCHITECTURE.md): `config` and `store` at the bottom, the
//! network path (`net`) and the operator surface (`operator`) over them, inbox delivery and
//! outbox relays beside them, `proxy` assembling one running proxy, `process` running it.
#![forbid(unsafe_code)]

mod cli;
pub mod config;
pub mod inbox;
mod net;
mod operator;
mod outbox;
mod process;
mod proxy;
pub mod store;
mod thread_slot;
mod tls;

pub use cli::run as run_command_line;
pub use config::config_digest;
pub use operator::admin::problem_types;
pub use operator::metric_catalog::{Metric, MetricKind, METRICS};
pub use operator::status::activity::RouteActivity;
pub use operator::status::{ConfigSummary, InboxQueues, InboxStats, Status};
pub use operator::telemetry::RouteTelemetry;
pub use proxy::{Proxy, ReloadState, StartError};

/// Installs the proxy's process-wide Prometheus recorder (counts batched per thread), as
/// [`Proxy`] does before it builds its routes: a program that gives its own layers the proxy's
/// [`RouteTelemetry`] installs it first, so their metrics reach `/metrics` as the proxy's do.
pub fn install_metrics_recorder() {
    operator::admin::metrics_handle();
}
