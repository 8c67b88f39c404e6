//! The proxy's configuration: the config file (SPEC section 8) and the command line (section 7)
//! merged into one validated [`Settings`].
//!
//! Everything is checked before anything starts, and every problem is reported as one line that
//! names the file, the line and the key (or the flag), so an operator can fix it at once.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cli::Cli;
use crate::error::ProblemBase;
use crate::idempotency::policy::Policy;
use crate::store::StoreSpec;

mod crypto;
mod file;
mod limits;
mod policy;
mod print;
mod resolve;
mod source;
mod values;

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod tests;

/// The listen address when neither the file nor `--listen` names one.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8080);

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The effective configuration: file and flags merged, defaults applied, everything validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub admin_listen: Option<SocketAddr>,
    pub store: StoreSpec,
    pub log_format: LogFormat,
    /// How long a shutdown waits for requests in flight.
    pub drain_timeout: Duration,
    /// The bearer token the admin endpoints `/metrics` and `/keys` require, if any.
    pub admin_token: Option<crate::secret::Secret>,
    /// The keys completed records are sealed with (`encryption_key`, `encryption_old_keys`).
    pub encryption: Option<crate::store::SealingKeys>,
    pub problem_base: Arc<ProblemBase>,
    /// What one client may cost: header time-out and size, connections at once.
    pub limits: crate::server::Limits,
    /// Configured routes in file order, then the route `default` if there is a top-level upstream.
    pub routes: Vec<RouteSettings>,
}

/// One route: which requests it takes, where they go, and the policy applied to them.
#[derive(Debug, Clone)]
pub struct RouteSettings {
    /// Always starts with `/`.
    pub path_prefix: String,
    /// Lower-cased, as requests are matched on it case-insensitively.
    pub host: Option<String>,
    /// `http://HOST:PORT[/path]`.
    pub upstream: http::Uri,
    /// How long an idle connection to the upstream is kept (`upstream_idle_timeout`).
    pub upstream_idle_timeout: Duration,
    /// `policy.route` is the route's name; `policy.problem_base` is `Settings::problem_base`.
    pub policy: Policy,
}

/// Why the configuration was refused. Its `Display` is a single line, fit for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The config file could not be read.
    Read { path: String, reason: String },
    /// A problem at a line of the file. `reason` already names the key; `key` is for callers
    /// that want it separately, and is `None` for a TOML syntax error.
    File {
        origin: String,
        line: usize,
        key: Option<String>,
        reason: String,
    },
    /// A bad command-line value.
    Flag { flag: &'static str, reason: String },
    /// Neither routes nor a top-level upstream: the proxy would have nowhere to send anything.
    NoUpstream,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, reason } => write!(f, "{path}: cannot read: {reason}"),
            ConfigError::File {
                origin,
                line,
                reason,
                ..
            } => write!(f, "{origin}:{line}: {reason}"),
            ConfigError::Flag { flag, reason } => write!(f, "{flag}: {reason}"),
            ConfigError::NoUpstream => f.write_str(
                "no upstream: pass --upstream URL or set upstream/[[routes]] in the config",
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Reads the file named by `--config` (if any) and merges the flags over it.
pub fn load(cli: &Cli) -> Result<Settings, ConfigError> {
    let Some(path) = &cli.config else {
        return load_str("(no config file)", "", cli);
    };
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: origin.clone(),
        reason: e.to_string(),
    })?;
    load_str(&origin, &text, cli)
}

/// Like [`load`], for config text that did not come from a file; `origin` names it in errors.
pub fn load_str(origin: &str, text: &str, cli: &Cli) -> Result<Settings, ConfigError> {
    let source = source::Source::new(origin, text);
    let raw = source.parse()?;
    resolve::resolve(&source, raw, cli)
}

impl Settings {
    /// The effective configuration in the config file's own vocabulary, every route with every
    /// policy key spelled out. Loading it back gives the same settings.
    pub fn to_toml(&self) -> String {
        print::to_toml(self)
    }
}
