//! The config file as written (docs/reference.md#config-file): raw serde structs, before any validation.
//!
//! Values that need checks serde cannot express (header names, durations, URLs) stay strings
//! here and are wrapped in `Spanned`, so that `resolve` can name the line of a bad value. The
//! same structs serialize back, which is how `Settings::to_toml` prints the effective config.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::settings::LogFormat;
use idempotency_core::policy::ByteSize;
use idempotency_core::policy::Protocol;
use idempotency_core::policy::Scheme;
use idempotency_core::policy::{AmbiguousPolicy, ConcurrentPolicy, RouteMode, StoreErrorPolicy};

/// The whole file. Every key is optional: a file may set only routes, or only defaults.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
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

/// One `[[consumers]]` table (docs/reference.md#consumer-keys): a broker's messages delivered
/// to an upstream through the idempotency layer, as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConsumerTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) source: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stream: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) durable: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) filter_subject: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) queue: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) path: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) method: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) key_from: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deliver_concurrency: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deliver_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deliver_success: Option<Spanned<Vec<i64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_initial: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_max: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_attempts: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) dead_letter: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ttl: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lease: Option<Spanned<String>>,
}

/// One `[[outboxes]]` table (docs/reference.md#outbox-keys): an outbox relay, as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OutboxTable {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) database: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) table: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deliver_to: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) topics: Option<Spanned<BTreeMap<String, String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) method: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) signing_secret: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) poll_interval: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) notify_channel: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deliver_concurrency: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) deliver_timeout: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_initial: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_max: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_attempts: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_age: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lease: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) on_dead: Option<Spanned<OnDeadChoice>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) keep_delivered: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream_ca: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream_client_cert: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream_client_key: Option<Spanned<String>>,
}

/// `on_dead`: what later rows of an aggregate do while an earlier one is dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum OnDeadChoice {
    Skip,
    Block,
}

/// What a `[[routes]]` table says besides policy: which requests it takes, and where they go.
#[derive(Debug, Default)]
pub(super) struct RouteHead {
    pub name: Option<Spanned<String>>,
    pub path_prefix: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub upstream: Option<Spanned<String>>,
}

/// Declares the policy keys once and generates, from that one list, the `[defaults]` table,
/// the `[[routes]]` table (which serde cannot `flatten` while denying unknown fields), and
/// the conversions between a route table and its head plus policy.
macro_rules! policy_keys {
    ($($key:ident: $ty:ty,)*) => {
        /// The policy keys of a `[defaults]` or `[[routes]]` table; an absent key inherits.
        #[derive(Debug, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct PolicyTable {
            $(
                #[serde(skip_serializing_if = "Option::is_none")]
                pub(super) $key: Option<Spanned<$ty>>,
            )*
        }

        /// One `[[routes]]` table: the route's own keys, then any policy key.
        #[derive(Debug, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct RouteTable {
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(super) name: Option<Spanned<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(super) path_prefix: Option<Spanned<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(super) host: Option<Spanned<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(super) upstream: Option<Spanned<String>>,
            $(
                #[serde(skip_serializing_if = "Option::is_none")]
                pub(super) $key: Option<Spanned<$ty>>,
            )*
        }

        impl RouteTable {
            pub(super) fn split(self) -> (RouteHead, PolicyTable) {
                let head = RouteHead {
                    name: self.name,
                    path_prefix: self.path_prefix,
                    host: self.host,
                    upstream: self.upstream,
                };
                (head, PolicyTable { $($key: self.$key,)* })
            }

            pub(super) fn join(head: RouteHead, policy: PolicyTable) -> Self {
                Self {
                    name: head.name,
                    path_prefix: head.path_prefix,
                    host: head.host,
                    upstream: head.upstream,
                    $($key: policy.$key,)*
                }
            }
        }
    };
}

policy_keys! {
    methods: Vec<String>,
    key_header: String,
    key_body_pointer: String,
    require_key: bool,
    scope_header: String,
    fingerprint_headers: Vec<String>,
    fingerprint_body: FingerprintBodyMode,
    fingerprint_ignore: Vec<String>,
    ttl: String,
    lease: String,
    concurrent: ConcurrentPolicy,
    wait_timeout: String,
    upstream_timeout: String,
    upstream_idle_timeout: String,
    max_request_body: ByteSize,
    max_cached_body: ByteSize,
    release_on: Vec<i64>,
    on_ambiguous: AmbiguousPolicy,
    on_store_error: StoreErrorPolicy,
    replay_exclude_headers: Vec<String>,
    replay_cache_ttl: String,
    verify: VerifyTable,
    upstream_ca: String,
    upstream_client_cert: String,
    upstream_client_key: String,
    mode: RouteMode,
    inbox_ack_status: i64,
    deliver_success: Vec<i64>,
    deliver_timeout: String,
    retry_initial: String,
    retry_max: String,
    max_attempts: i64,
    max_age: String,
    deliver_concurrency: i64,
    deliver_rate: i64,
    protocol: Protocol,
    grpc_release_on: Vec<i64>,
    grpc_keyed_streams: bool,
}

/// `fingerprint_body`: whether a route's fingerprint reads the body's bytes or its canonical
/// JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum FingerprintBodyMode {
    Bytes,
    Json,
}

/// Wraps a value for printing; spans only matter for values read from a file.
pub(super) fn unspanned<T>(value: T) -> Option<Spanned<T>> {
    Some(Spanned::new(0..0, value))
}

/// A route's `verify` table as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct VerifyTable {
    pub(super) scheme: Scheme,
    pub(super) secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tolerance: Option<String>,
}
