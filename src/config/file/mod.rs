//! The config file as a whole (docs/reference.md#config-file): its top-level keys as written,
//! raw serde structs before any validation (`mod.rs`), resolved with every subject's keys into
//! [`Settings`](crate::config::Settings) (`resolve.rs`), printed back for `--check`
//! (`print.rs`), and what a reload may not change (`restart.rs`).
//!
//! Values that need checks serde cannot express (header names, durations, URLs) stay strings
//! here and are wrapped in `Spanned`, so that `resolve` can name the line of a bad value. The
//! same structs serialize back, which is how `Settings::to_toml` prints the effective config.
//! The tables of routes, outboxes and consumers are their subjects' (`routes/keys.rs`,
//! `outbox/keys.rs`, `consumer/keys.rs`).

pub(in crate::config) mod print;
pub(in crate::config) mod resolve;
pub(in crate::config) mod restart;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::config::consumer::keys::ConsumerTable;
use crate::config::outbox::keys::OutboxTable;
use crate::config::routes::keys::{PolicyTable, RouteTable};
use crate::config::settings::LogFormat;
use idempotency_core::policy::ByteSize;

/// The whole file. Every key is optional: a file may set only routes, or only defaults.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Spanned<String>>,
    // The Postgres store's keys (see `store_keys.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_schema: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_pool_size: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_statement_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_ca: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem_base: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<Spanned<LogFormat>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<Spanned<String>>,
    // The limits (see `limits.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_read_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_header_bytes: Option<Spanned<ByteSize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption_key: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encryption_old_keys: Vec<Spanned<String>>,
    // The listener's certificate and key (see `tls.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<PolicyTable>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Spanned<RouteTable>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outboxes: Vec<Spanned<OutboxTable>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<Spanned<ConsumerTable>>,
}

/// Wraps a value for printing; spans only matter for values read from a file.
pub(in crate::config) fn unspanned<T>(value: T) -> Option<Spanned<T>> {
    Some(Spanned::new(0..0, value))
}
