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
#![forbid(unsafe_code)]

mod admin;
mod cli;
pub mod config;
mod consumer;
mod framing;
pub mod inbox;
mod logging;
mod metric_catalog;
mod outbox;
mod proxy;
mod router;
mod scraped;
mod server;
mod status;
pub mod store;
mod telemetry;
mod thread_slot;
mod tls;
mod upstream;

pub use cli::run as run_command_line;
pub use config::config_digest;
pub use metric_catalog::{Metric, MetricKind, METRICS};
pub use proxy::{Proxy, ReloadState, StartError};
pub use status::activity::RouteActivity;
pub use status::{ConfigSummary, InboxQueues, InboxStats, Status};
pub use telemetry::RouteTelemetry;

/// Installs the proxy's process-wide Prometheus recorder (counts batched per thread), as
/// [`Proxy`] does before it builds its routes: a program that gives its own layers the proxy's
/// [`RouteTelemetry`] installs it first, so their metrics reach `/metrics` as the proxy's do.
pub fn install_metrics_recorder() {
    admin::metrics_handle();
}
