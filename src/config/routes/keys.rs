//! The `[defaults]` and `[[routes]]` tables as written: raw serde structs, before any
//! validation, declared from one list of policy keys.

use serde::{Deserialize, Serialize};
use toml::Spanned;

use idempotency_core::policy::ByteSize;
use idempotency_core::policy::Protocol;
use idempotency_core::policy::Scheme;
use idempotency_core::policy::{AmbiguousPolicy, ConcurrentPolicy, RouteMode, StoreErrorPolicy};

/// What a `[[routes]]` table says besides policy: which requests it takes, and where they go.
#[derive(Debug, Default)]
pub(in crate::config) struct RouteHead {
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
        pub(in crate::config) struct PolicyTable {
            $(
                #[serde(skip_serializing_if = "Option::is_none")]
                pub(in crate::config) $key: Option<Spanned<$ty>>,
            )*
        }

        /// One `[[routes]]` table: the route's own keys, then any policy key.
        #[derive(Debug, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub(in crate::config) struct RouteTable {
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(in crate::config) name: Option<Spanned<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(in crate::config) path_prefix: Option<Spanned<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(in crate::config) host: Option<Spanned<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub(in crate::config) upstream: Option<Spanned<String>>,
            $(
                #[serde(skip_serializing_if = "Option::is_none")]
                pub(in crate::config) $key: Option<Spanned<$ty>>,
            )*
        }

        impl RouteTable {
            pub(in crate::config) fn split(self) -> (RouteHead, PolicyTable) {
                let head = RouteHead {
                    name: self.name,
                    path_prefix: self.path_prefix,
                    host: self.host,
                    upstream: self.upstream,
                };
                (head, PolicyTable { $($key: self.$key,)* })
            }

            pub(in crate::config) fn join(head: RouteHead, policy: PolicyTable) -> Self {
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
pub(in crate::config) enum FingerprintBodyMode {
    Bytes,
    Json,
}

/// A route's `verify` table as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct VerifyTable {
    pub(in crate::config) scheme: Scheme,
    pub(in crate::config) secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::config) tolerance: Option<String>,
}
