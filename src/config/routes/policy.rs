//! Applying a `[defaults]` or `[[routes]]` table's keys over what a route inherits.

use std::time::Duration;

use toml::Spanned;

use crate::config::common::error::{ConfigError, Reason};
use crate::config::common::source::Source;
use crate::config::common::values::{duration, header, headers, method, optional_header, status};
use crate::config::routes::keys::{FingerprintBodyMode, PolicyTable};
use crate::config::settings::RouteSettings;
use crate::inbox::policy::DeliveryPolicy;
use crate::tls::UpstreamTls;
use idempotency_core::policy::FingerprintBody;
use idempotency_core::policy::GrpcCode;
use idempotency_core::policy::JsonPointer;
use idempotency_core::proxy::humane_duration;
use idempotency_core::{policy::KeySource, Policy, PolicyError};

/// What a route inherits from `[defaults]` and may override: the idempotency layer's policy,
/// and how the proxy serves the route.
#[derive(Debug, Clone)]
pub(in crate::config) struct Inherited {
    pub(in crate::config) policy: Policy,
    pub(in crate::config) replay_cache_ttl: Duration,
    pub(in crate::config) upstream_idle_timeout: Duration,
    pub(in crate::config) upstream_tls: UpstreamTls,
    pub(in crate::config) delivery: DeliveryPolicy,
}

impl Inherited {
    pub(in crate::config) fn new(policy: Policy) -> Self {
        Self {
            policy,
            replay_cache_ttl: RouteSettings::DEFAULT_REPLAY_CACHE_TTL,
            upstream_idle_timeout: RouteSettings::DEFAULT_UPSTREAM_IDLE_TIMEOUT,
            upstream_tls: UpstreamTls::default(),
            delivery: DeliveryPolicy::default(),
        }
    }
}

/// Overrides every key the table sets; the others keep their inherited value.
pub(in crate::config) fn apply(
    src: &Source,
    inherited: &mut Inherited,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    // Zero is allowed here: it turns the local replay cache off.
    let cache = &mut inherited.replay_cache_ttl;
    src.set("replay_cache_ttl", &table.replay_cache_ttl, cache, |d| {
        idempotency_core::proxy::humane_duration::parse(d)
    })?;
    let idle = &mut inherited.upstream_idle_timeout;
    src.set(
        "upstream_idle_timeout",
        &table.upstream_idle_timeout,
        idle,
        |d| duration(d),
    )?;
    crate::config::tls::apply(src, &mut inherited.upstream_tls, table)?;
    crate::config::routes::inbox::apply(
        src,
        &mut inherited.policy,
        &mut inherited.delivery,
        table,
    )?;
    apply_policy(src, &mut inherited.policy, table)?;
    inherited
        .policy
        .validate()
        .map_err(|refused| refusal(src, table, &refused))
}

/// A value the policy refused, at the line of the key that set it. A table that did not set
/// the key inherited a value its `[defaults]` already passed, so a refusal names a key here.
fn refusal(src: &Source, table: &PolicyTable, refused: &PolicyError) -> ConfigError {
    let span = match refused.key() {
        "ttl" => table.ttl.as_ref().map(Spanned::span),
        "lease" => table.lease.as_ref().map(Spanned::span),
        "wait_timeout" => table.wait_timeout.as_ref().map(Spanned::span),
        "upstream_timeout" => table.upstream_timeout.as_ref().map(Spanned::span),
        "key_body_pointer" => table.key_body_pointer.as_ref().map(Spanned::span),
        "inbox_ack_status" => table.inbox_ack_status.as_ref().map(Spanned::span),
        "mode" => table.mode.as_ref().map(Spanned::span),
        "fingerprint_body" => (table.fingerprint_body.as_ref().map(Spanned::span))
            .or(table.protocol.as_ref().map(Spanned::span)),
        _ => None,
    };
    src.at(
        span.unwrap_or_default(),
        Some(refused.key()),
        refused.to_string(),
    )
}

fn apply_policy(src: &Source, policy: &mut Policy, table: &PolicyTable) -> Result<(), ConfigError> {
    apply_key_source(src, policy, table)?;
    apply_headers(src, policy, table)?;
    apply_fingerprint_body(src, policy, table)?;
    apply_durations(src, policy, table)?;
    apply_choices(policy, table);
    src.set("verify", &table.verify, &mut policy.verify, |v| {
        crate::config::crypto::verifier(v).map(Some)
    })?;
    src.set("methods", &table.methods, &mut policy.methods, |v| {
        v.iter().map(|m| method(m)).collect()
    })?;
    src.set(
        "release_on",
        &table.release_on,
        &mut policy.release_on,
        |v| v.iter().map(|s| status(*s)).collect(),
    )?;
    apply_grpc(src, policy, table)
}

/// `protocol`, `grpc_release_on`, `grpc_keyed_streams` (docs/grpc.md).
fn apply_grpc(src: &Source, policy: &mut Policy, table: &PolicyTable) -> Result<(), ConfigError> {
    copy(&table.protocol, &mut policy.protocol);
    copy(&table.grpc_keyed_streams, &mut policy.grpc_keyed_streams);
    src.set(
        "grpc_release_on",
        &table.grpc_release_on,
        &mut policy.grpc_release_on,
        |v| v.iter().map(|c| grpc_code(*c)).collect(),
    )
}

/// A gRPC status code: 0 to 16.
fn grpc_code(code: i64) -> Result<GrpcCode, String> {
    match u32::try_from(code) {
        Ok(code @ 0..=16) => Ok(GrpcCode(code)),
        _ => Err(format!("{code} is not a gRPC status code (0 to 16)")),
    }
}

/// A table names at most one key source; naming one replaces the inherited one, whichever kind.
fn apply_key_source(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    if let (Some(header), Some(pointer)) = (&table.key_header, &table.key_body_pointer) {
        let header_line = src.line(header.span().start);
        let reason = format!(
            "a table names one key source, but key_header is also set (line {header_line}); remove one"
        );
        return Err(src.bad(pointer, "key_body_pointer", reason));
    }
    let source = &mut policy.key_source;
    src.set("key_header", &table.key_header, source, |h| {
        header(h).map(KeySource::Header)
    })?;
    src.set("key_body_pointer", &table.key_body_pointer, source, |p| {
        Ok::<_, std::convert::Infallible>(KeySource::BodyPointer(p.clone()))
    })
}

fn apply_headers(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    let scope = &mut policy.scope_header;
    src.set("scope_header", &table.scope_header, scope, |h| {
        optional_header(h)
    })?;
    let fingerprint = &mut policy.fingerprint_headers;
    src.set(
        "fingerprint_headers",
        &table.fingerprint_headers,
        fingerprint,
        |v| headers(v),
    )?;
    let exclude = &mut policy.replay_exclude_headers;
    src.set(
        "replay_exclude_headers",
        &table.replay_exclude_headers,
        exclude,
        |v| headers(v),
    )
}

/// `fingerprint_body` and `fingerprint_ignore`. Naming `"json"` again keeps the pointers the
/// table inherited, and `"bytes"` drops them; pointers given where the body is read as bytes
/// are refused, as they would silently change nothing.
fn apply_fingerprint_body(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    let body = &mut policy.fingerprint_body;
    if let Some(mode) = &table.fingerprint_body {
        match (mode.get_ref(), &*body) {
            (FingerprintBodyMode::Bytes, _) => *body = FingerprintBody::Bytes,
            (FingerprintBodyMode::Json, FingerprintBody::Json { .. }) => {}
            (FingerprintBodyMode::Json, FingerprintBody::Bytes) => {
                *body = FingerprintBody::Json { ignore: Vec::new() };
            }
        }
    }
    let Some(given) = &table.fingerprint_ignore else {
        return Ok(());
    };
    let bad = |reason: String| src.bad(given, "fingerprint_ignore", reason);
    let pointers: Vec<JsonPointer> = given
        .get_ref()
        .iter()
        .map(|pointer| JsonPointer::parse(pointer))
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.into_reason()))?;
    match body {
        FingerprintBody::Json { ignore } => *ignore = pointers,
        FingerprintBody::Bytes if pointers.is_empty() => {}
        FingerprintBody::Bytes => {
            return Err(bad(
                "members can only be ignored in a JSON body, and this table fingerprints the \
                 body's bytes; set fingerprint_body = \"json\" beside it"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

fn apply_durations(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    // A zero is read here and refused by the policy's own check, in its words.
    let parse = |d: &String| humane_duration::parse(d);
    src.set("ttl", &table.ttl, &mut policy.ttl, parse)?;
    src.set("lease", &table.lease, &mut policy.lease, parse)?;
    src.set(
        "wait_timeout",
        &table.wait_timeout,
        &mut policy.wait_timeout,
        parse,
    )?;
    let upstream = &mut policy.upstream_timeout;
    src.set("upstream_timeout", &table.upstream_timeout, upstream, parse)
}

/// Keys whose every well-typed value is valid: serde has already checked them.
fn apply_choices(policy: &mut Policy, table: &PolicyTable) {
    copy(&table.require_key, &mut policy.require_key);
    copy(&table.concurrent, &mut policy.concurrent);
    copy(&table.on_ambiguous, &mut policy.on_ambiguous);
    copy(&table.on_store_error, &mut policy.on_store_error);
    copy(&table.max_request_body, &mut policy.max_request_body);
    copy(&table.max_cached_body, &mut policy.max_cached_body);
}

fn copy<T: Copy>(given: &Option<Spanned<T>>, target: &mut T) {
    if let Some(value) = given {
        *target = *value.get_ref();
    }
}
