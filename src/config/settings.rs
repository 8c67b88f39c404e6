//! The effective configuration: what the file and the flags come to once merged and checked.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::consumer::{BrokerSource, ConsumerConfig};
use crate::inbox::policy::DeliveryPolicy;
pub use crate::operator::logging::LogFormat;
pub use crate::outbox::OutboxSettings;
use crate::store::{PostgresSettings, SealingKeys, StoreSpec};
use crate::tls::{ListenerTls, UpstreamTls};
use idempotency_core::policy::ByteSize;
use idempotency_core::Policy;
use idempotency_core::ProblemBase;
use idempotency_core::Secret;

/// The listen address when neither the file nor `--listen` names one.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);

/// What the command line (or its environment variables) says, each value as typed: these
/// override the file, and are checked by the same code as the file's values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The config file, if any (`--config`).
    pub config: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<String>,
    /// `--upstream`.
    pub upstream: Option<String>,
    /// `--store`.
    pub store: Option<String>,
    /// `--admin-listen`.
    pub admin_listen: Option<String>,
    /// `--log-format`.
    pub log_format: Option<LogFormat>,
    /// `--tls-cert`: `file:PATH` or a bare path.
    pub tls_cert: Option<String>,
    /// `--tls-key`: `file:PATH` or a bare path.
    pub tls_key: Option<String>,
}

/// The effective configuration: file and flags merged, defaults applied, everything validated.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where clients connect.
    pub listen: SocketAddr,
    /// Where the admin endpoints listen, if anywhere.
    pub admin_listen: Option<SocketAddr>,
    /// Where records live.
    pub store: StoreSpec,
    /// The Postgres store's own keys (`store_schema`, `store_pool_size`,
    /// `store_statement_timeout`, `store_ca`); defaults unless the file sets them.
    pub postgres: PostgresSettings,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// How long a shutdown waits for requests in flight.
    pub drain_timeout: Duration,
    /// How many threads serve clients, each with a runtime and a listener socket of its own
    /// (`workers`, one per CPU by default).
    pub workers: usize,
    /// The bearer token the admin endpoints `/metrics` and `/keys` require, if any.
    pub admin_token: Option<Secret>,
    /// The keys completed records are sealed with (`encryption_key`, `encryption_old_keys`).
    pub encryption: Option<SealingKeys>,
    /// The prefix of every problem type.
    pub problem_base: Arc<ProblemBase>,
    /// What one client may cost: header time-out and size, connections at once.
    pub limits: Limits,
    /// The listener's certificate and key (`tls_cert`, `tls_key`): with them it speaks HTTPS
    /// only.
    pub tls: Option<ListenerTls>,
    /// Configured routes in file order, then the route `default` if there is a top-level
    /// upstream. None in a relay-only process.
    pub routes: Vec<RouteSettings>,
    /// The outbox relays (`[[outboxes]]`), in file order.
    pub outboxes: Vec<OutboxSettings>,
    /// The broker consumers (`[[consumers]]`), in file order.
    pub consumers: Vec<ConsumerConfig>,
}

/// One route: which requests it takes, where they go, and the policy applied to them.
#[derive(Debug, Clone)]
pub struct RouteSettings {
    /// Always starts with `/`.
    pub path_prefix: String,
    /// Lower-cased, as requests are matched on it case-insensitively.
    pub host: Option<String>,
    /// `http://HOST:PORT[/path]` or `https://HOST[:PORT][/path]`.
    pub upstream: http::Uri,
    /// How long an idle connection to the upstream is kept (`upstream_idle_timeout`).
    pub upstream_idle_timeout: Duration,
    /// `policy.route` is the route's name.
    pub policy: Policy,
    /// What connections to an `https://` upstream trust and present.
    pub upstream_tls: UpstreamTls,
    /// How long a replica answers a replay from its own copy of a completed record; an
    /// operator's `DELETE` on another replica is seen here within this time. Zero turns it off.
    pub replay_cache_ttl: Duration,
    /// How an inbox route (`policy.mode = inbox`) delivers what it acknowledged.
    pub delivery: DeliveryPolicy,
}

impl RouteSettings {
    /// The `replay_cache_ttl` when no table sets one.
    pub const DEFAULT_REPLAY_CACHE_TTL: Duration = Duration::from_secs(1);
    /// The `upstream_idle_timeout` when no table sets one (docs/reference.md#upstream-connections).
    pub const DEFAULT_UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(1);
}

/// What one client may cost the proxy (docs/reference.md#top-level-keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A client that has not sent a whole request head by then is disconnected; so is an
    /// HTTP/2 connection with no request in progress for that long, and an HTTP/2 peer that
    /// leaves a PING unanswered for that long.
    pub header_read_timeout: Duration,
    /// The largest request head (HTTP/1) or header list (HTTP/2); larger gets `431`.
    pub max_header_bytes: ByteSize,
    /// Client connections served at once; past it the accept loop waits for one to close.
    pub max_connections: usize,
}

impl Limits {
    /// hyper refuses a read buffer smaller than this.
    pub const MIN_HEADER_BYTES: ByteSize = ByteSize::kib(8);
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: ByteSize::kib(64),
            max_connections: 10_000,
        }
    }
}
