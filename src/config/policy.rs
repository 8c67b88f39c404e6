//! Applying a `[defaults]` or `[[routes]]` table's policy keys over an inherited [`Policy`],
//! and the checks on single values that serde cannot express.

use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use toml::Spanned;

use super::file::PolicyTable;
use super::source::Source;
use super::ConfigError;
use crate::idempotency::policy::{KeySource, Policy};
use crate::units::humane_duration;

/// Overrides in `policy` every key the table sets; the others keep their inherited value.
pub fn apply(src: &Source, policy: &mut Policy, table: &PolicyTable) -> Result<(), ConfigError> {
    apply_key_source(src, policy, table)?;
    apply_headers(src, policy, table)?;
    apply_durations(src, policy, table)?;
    apply_choices(src, policy, table)?;
    set(src, "methods", &table.methods, &mut policy.methods, |v| {
        v.iter().map(|m| method(m)).collect()
    })?;
    set(
        src,
        "release_on",
        &table.release_on,
        &mut policy.release_on,
        |v| v.iter().map(|s| status(*s)).collect(),
    )
}

/// Parses the value of `key`, if the table sets it, into `target`.
fn set<T, V>(
    src: &Source,
    key: &str,
    given: &Option<Spanned<T>>,
    target: &mut V,
    parse: impl FnOnce(&T) -> Result<V, String>,
) -> Result<(), ConfigError> {
    if let Some(spanned) = given {
        *target = parse(spanned.get_ref()).map_err(|reason| src.bad(spanned, key, reason))?;
    }
    Ok(())
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
    set(src, "key_header", &table.key_header, source, |h| {
        header(h).map(KeySource::Header)
    })?;
    set(
        src,
        "key_body_pointer",
        &table.key_body_pointer,
        source,
        |p| json_pointer(p).map(KeySource::BodyPointer),
    )
}

fn apply_headers(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    set(
        src,
        "scope_header",
        &table.scope_header,
        &mut policy.scope_header,
        |h| {
            // TOML has no null: an empty name is how a route drops a scope header it inherited.
            (!h.is_empty()).then(|| header(h)).transpose()
        },
    )?;
    let fingerprint = &mut policy.fingerprint_headers;
    set(
        src,
        "fingerprint_headers",
        &table.fingerprint_headers,
        fingerprint,
        |v| headers(v),
    )?;
    let exclude = &mut policy.replay_exclude_headers;
    set(
        src,
        "replay_exclude_headers",
        &table.replay_exclude_headers,
        exclude,
        |v| headers(v),
    )
}

fn apply_durations(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    set(src, "ttl", &table.ttl, &mut policy.ttl, |d| duration(d))?;
    set(src, "lease", &table.lease, &mut policy.lease, |d| {
        duration(d)
    })?;
    set(
        src,
        "wait_timeout",
        &table.wait_timeout,
        &mut policy.wait_timeout,
        |d| duration(d),
    )?;
    let upstream = &mut policy.upstream_timeout;
    set(
        src,
        "upstream_timeout",
        &table.upstream_timeout,
        upstream,
        |d| duration(d),
    )
}

/// Keys whose every well-typed value is valid; serde has already checked them.
fn apply_choices(
    src: &Source,
    policy: &mut Policy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    set(
        src,
        "require_key",
        &table.require_key,
        &mut policy.require_key,
        |b| Ok(*b),
    )?;
    set(
        src,
        "concurrent",
        &table.concurrent,
        &mut policy.concurrent,
        |c| Ok(*c),
    )?;
    set(
        src,
        "on_ambiguous",
        &table.on_ambiguous,
        &mut policy.on_ambiguous,
        |a| Ok(*a),
    )?;
    let on_store_error = &mut policy.on_store_error;
    set(
        src,
        "on_store_error",
        &table.on_store_error,
        on_store_error,
        |s| Ok(*s),
    )?;
    let request = &mut policy.max_request_body;
    set(
        src,
        "max_request_body",
        &table.max_request_body,
        request,
        |s| Ok(*s),
    )?;
    let cached = &mut policy.max_cached_body;
    set(
        src,
        "max_cached_body",
        &table.max_cached_body,
        cached,
        |s| Ok(*s),
    )
}

/// A humane duration; zero is refused, as a zero lease, ttl or timeout would make every
/// request fail or every record vanish at once.
pub fn duration(raw: &str) -> Result<Duration, String> {
    let duration = humane_duration::parse(raw)?;
    if duration.is_zero() {
        return Err(format!("duration {raw:?} must be more than zero"));
    }
    Ok(duration)
}

fn header(raw: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(raw.as_bytes()).map_err(|_| {
        format!("invalid header name {raw:?}: expected a token such as \"Idempotency-Key\"")
    })
}

fn headers(raw: &[String]) -> Result<Vec<HeaderName>, String> {
    raw.iter().map(|h| header(h)).collect()
}

/// Methods are case-sensitive, so `post` would silently never match a `POST`: refuse it.
fn method(raw: &str) -> Result<Method, String> {
    let bad = || format!("invalid method {raw:?}: expected an upper-case method such as \"POST\"");
    if raw.chars().any(|c| c.is_ascii_lowercase()) {
        return Err(bad());
    }
    Method::from_bytes(raw.as_bytes()).map_err(|_| bad())
}

fn status(raw: i64) -> Result<StatusCode, String> {
    u16::try_from(raw)
        .ok()
        .filter(|s| (100..=599).contains(s))
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| format!("status {raw} is outside 100..=599"))
}

/// An RFC 6901 pointer: empty (the whole body) or starting with `/`.
fn json_pointer(raw: &str) -> Result<String, String> {
    if raw.is_empty() || raw.starts_with('/') {
        Ok(raw.to_owned())
    } else {
        Err(format!(
            "invalid JSON pointer {raw:?}: expected \"\" or a path starting with '/', such as \"/id\""
        ))
    }
}
