//! Applying a `[defaults]` or `[[routes]]` table's keys over what a route inherits.

use std::time::Duration;

use toml::Spanned;

use super::error::ConfigError;
use super::file::{FingerprintBodyMode, PolicyTable};
use super::settings::RouteSettings;
use super::source::Source;
use super::values::{duration, header, headers, json_pointer, method, optional_header, status};
use crate::idempotency::policy::{KeySource, Policy};
use crate::inbox::policy::DeliveryPolicy;
use crate::model::jcs::JsonPointer;
use crate::model::FingerprintBody;
use crate::tls::UpstreamTls;

/// What a route inherits from `[defaults]` and may override: the idempotency layer's policy,
/// and how the proxy serves the route.
#[derive(Debug, Clone)]
pub(super) struct Inherited {
    pub(super) policy: Policy,
    pub(super) replay_cache_ttl: Duration,
    pub(super) upstream_idle_timeout: Duration,
    pub(super) upstream_tls: UpstreamTls,
    pub(super) delivery: DeliveryPolicy,
}

impl Inherited {
    pub(super) fn new(policy: Policy) -> Self {
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
pub(super) fn apply(
    src: &Source,
    inherited: &mut Inherited,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    // Zero is allowed here: it turns the local replay cache off.
    let cache = &mut inherited.replay_cache_ttl;
    src.set("replay_cache_ttl", &table.replay_cache_ttl, cache, |d| {
        crate::units::humane_duration::parse(d)
    })?;
    let idle = &mut inherited.upstream_idle_timeout;
    src.set(
        "upstream_idle_timeout",
        &table.upstream_idle_timeout,
        idle,
        |d| duration(d),
    )?;
    super::tls::apply(src, &mut inherited.upstream_tls, table)?;
    super::inbox::apply(src, &mut inherited.policy, &mut inherited.delivery, table)?;
    apply_policy(src, &mut inherited.policy, table)
}

fn apply_policy(src: &Source, policy: &mut Policy, table: &PolicyTable) -> Result<(), ConfigError> {
    apply_key_source(src, policy, table)?;
    apply_headers(src, policy, table)?;
    apply_fingerprint_body(src, policy, table)?;
    apply_durations(src, policy, table)?;
    apply_choices(policy, table);
    src.set("verify", &table.verify, &mut policy.verify, |v| {
        super::crypto::verifier(v).map(Some)
    })?;
    src.set("methods", &table.methods, &mut policy.methods, |v| {
        v.iter().map(|m| method(m)).collect()
    })?;
    src.set(
        "release_on",
        &table.release_on,
        &mut policy.release_on,
        |v| v.iter().map(|s| status(*s)).collect(),
    )
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
        json_pointer(p).map(KeySource::BodyPointer)
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
        .map_err(bad)?;
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
    src.set("ttl", &table.ttl, &mut policy.ttl, |d| duration(d))?;
    src.set("lease", &table.lease, &mut policy.lease, |d| duration(d))?;
    src.set(
        "wait_timeout",
        &table.wait_timeout,
        &mut policy.wait_timeout,
        |d| duration(d),
    )?;
    let upstream = &mut policy.upstream_timeout;
    src.set("upstream_timeout", &table.upstream_timeout, upstream, |d| {
        duration(d)
    })
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
