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
mod framing;
#[doc(hidden)]
pub mod fuzzing;
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
pub use status::{ConfigSummary, InboxQueues, InboxStats, Status};

/// The recording every request does (metrics, its log line, the status page's counts),
/// reachable for `benches/hot_paths.rs`. Not part of the proxy's API.
#[doc(hidden)]
pub mod recording {
    pub use crate::status::activity::RouteActivity;
    pub use crate::telemetry::RouteTelemetry;
    pub use idempotency_core::idempotency::RouteMetrics;
    pub use idempotency_core::outcome::RequestOutcome;

    /// Installs the process-wide Prometheus recorder, as the proxy does before building routes.
    pub fn install_recorder() {
        crate::admin::metrics_handle();
    }
}
