//! idempotency-proxy: a reverse proxy, and a `tower::Layer`, that makes unsafe HTTP requests
//! safe to retry.
//!
//! A client attaches an idempotency key; the first request with that key goes to the upstream,
//! its answer is stored, and every retry with the same key gets the stored answer.
//!
//! As a library: put [`IdempotencyLayer`] (with a [`Policy`] and a [`Store`]) in front of a
//! service, and [`ProblemLayer`] outside it to render the layer's own answers. The vocabulary
//! the layer and the stores share is in [`model`]. As a whole proxy: [`Proxy`] serves what a
//! [`config::Settings`] describes; the binary is [`run_command_line`].
#![forbid(unsafe_code)]

mod admin;
mod cli;
pub mod config;
pub mod error;
mod framing;
#[doc(hidden)]
pub mod fuzzing;
mod headers;
pub mod idempotency;
pub mod inbox;
mod logging;
mod metric_catalog;
pub mod model;
mod outcome;
mod problem;
mod proxy;
mod router;
mod secret;
mod server;
mod status;
pub mod store;
mod telemetry;
mod thread_slot;
mod tls;
pub mod units;
mod upstream;

pub use cli::run as run_command_line;
pub use error::{BoxError, ProxyError};
pub use idempotency::{IdempotencyLayer, IdempotencyService, Policy};
pub use metric_catalog::{Metric, MetricKind, METRICS};
pub use problem::{ProblemBase, ProblemLayer, ProblemService};
pub use proxy::{Proxy, ReloadState, StartError};
pub use secret::Secret;
pub use status::{config_digest, InboxQueues, InboxStats, Status};
pub use store::{Store, StoreError};

/// The recording every request does (metrics, its log line, the status page's counts),
/// reachable for `benches/hot_paths.rs`. Not part of the proxy's API.
#[doc(hidden)]
pub mod recording {
    pub use crate::outcome::RequestOutcome;
    pub use crate::status::activity::RouteActivity;
    pub use crate::telemetry::RouteMetrics;

    /// Installs the process-wide Prometheus recorder, as the proxy does before building routes.
    pub fn install_recorder() {
        crate::admin::metrics_handle();
    }
}
