//! Checks on single values that serde cannot express: addresses, URLs, header names,
//! methods, statuses and durations. Each returns the reason a value is refused; the caller
//! adds where it was found.

use std::net::SocketAddr;
use std::time::Duration;

use http::uri::{Authority, PathAndQuery};
use http::{HeaderName, Method, StatusCode, Uri};

use super::error::Reason;
use idempotency_core::proxy::humane_duration;

/// A humane duration; zero is refused, as a zero lease, ttl or timeout would make every
/// request fail or every record vanish at once.
pub(in crate::config) fn duration(raw: &str) -> Result<Duration, String> {
    let duration = humane_duration::parse(raw).map_err(Reason::into_reason)?;
    if duration.is_zero() {
        return Err(format!("duration {raw:?} must be more than zero"));
    }
    Ok(duration)
}

pub(in crate::config) fn header(raw: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(raw.as_bytes()).map_err(|_| {
        format!("invalid header name {raw:?}: expected a token such as \"Idempotency-Key\"")
    })
}

/// TOML has no null: an empty name is how a route drops a scope header it inherited.
pub(in crate::config) fn optional_header(raw: &str) -> Result<Option<HeaderName>, String> {
    (!raw.is_empty()).then(|| header(raw)).transpose()
}

pub(in crate::config) fn headers(raw: &[String]) -> Result<Vec<HeaderName>, String> {
    raw.iter().map(|h| header(h)).collect()
}

/// Methods are case-sensitive, so `post` would silently never match a `POST`: refuse it.
pub(in crate::config) fn method(raw: &str) -> Result<Method, String> {
    let bad = || format!("invalid method {raw:?}: expected an upper-case method such as \"POST\"");
    if raw.chars().any(|c| c.is_ascii_lowercase()) {
        return Err(bad());
    }
    Method::from_bytes(raw.as_bytes()).map_err(|_| bad())
}

pub(in crate::config) fn status(raw: i64) -> Result<StatusCode, String> {
    u16::try_from(raw)
        .ok()
        .filter(|s| (100..=599).contains(s))
        .and_then(|s| StatusCode::from_u16(s).ok())
        .ok_or_else(|| format!("status {raw} is outside 100..=599"))
}

pub(in crate::config) fn socket_addr(raw: &str) -> Result<SocketAddr, String> {
    raw.trim()
        .parse()
        .map_err(|_| format!("invalid address {raw:?}: expected IP:PORT such as 127.0.0.1:8080"))
}

pub(in crate::config) fn path_prefix(raw: &str) -> Result<String, String> {
    let valid =
        raw.starts_with('/') && !raw.contains(['?', '#']) && raw.parse::<PathAndQuery>().is_ok();
    if !valid {
        return Err(format!(
            "invalid path prefix {raw:?}: expected a path starting with '/', such as \"/v1/\""
        ));
    }
    Ok(raw.to_owned())
}

pub(in crate::config) fn host(raw: &str) -> Result<String, String> {
    let valid = !raw.is_empty() && !raw.contains('@') && raw.parse::<Authority>().is_ok();
    if !valid {
        return Err(format!(
            "invalid host {raw:?}: expected a host name such as \"api.example.com\""
        ));
    }
    // A request's host is matched without its port, so a route host with one could never
    // match: refused here rather than left to route nothing.
    if let Some(name) = raw.parse::<Authority>().ok().filter(|a| a.port().is_some()) {
        return Err(format!(
            "host {raw:?} has a port: a route matches the host name whatever port the request \
             came to; write {:?}",
            name.host()
        ));
    }
    Ok(raw.to_ascii_lowercase())
}

/// An upstream base URL: `http://HOST:PORT[/path]`, or `https://HOST[:PORT][/path]` (port 443
/// when none is given, as `https://` URLs of payment processors are written without one).
pub(in crate::config) fn upstream_uri(raw: &str) -> Result<Uri, String> {
    let bad = |why: &str| {
        format!("invalid upstream URL {raw:?} ({why}): expected http://HOST:PORT[/path] or https://HOST[:PORT][/path]")
    };
    let uri: Uri = raw
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    let https = uri.scheme_str() == Some("https");
    let authority = uri.authority().map(Authority::as_str).unwrap_or_default();
    let problem = match () {
        () if !https && uri.scheme_str() != Some("http") => "not http:// or https://",
        () if uri.host().is_none_or(str::is_empty) => "no host",
        () if !https && uri.port_u16().is_none() => "no port",
        () if authority.contains('@') => "user info is not allowed",
        () if uri.query().is_some() => "a query is not allowed",
        () => return Ok(uri),
    };
    Err(bad(problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_keep_their_path() {
        let uri = upstream_uri("http://127.0.0.1:9000/base/").unwrap();
        assert_eq!(uri.path(), "/base/");
        assert_eq!(uri.port_u16(), Some(9000));
    }

    #[test]
    fn https_upstreams_may_leave_out_the_port() {
        let uri = upstream_uri("https://api.example.com/v1").unwrap();
        assert_eq!((uri.scheme_str(), uri.port_u16()), (Some("https"), None));
        assert_eq!(
            upstream_uri("https://[::1]:8443").unwrap().port_u16(),
            Some(8443)
        );
        assert!(upstream_uri("http://api.example.com").is_err());
        assert!(upstream_uri("https://u@api.example.com").is_err());
    }

    #[test]
    fn statuses_and_durations_at_their_bounds() {
        assert!(status(100).is_ok() && status(599).is_ok());
        assert!(status(i64::MAX).is_err() && status(i64::MIN).is_err());
        assert_eq!(duration("1ms").unwrap(), Duration::from_millis(1));
        assert!(duration("0ms").is_err());
    }

    #[test]
    fn hosts_are_lower_cased_and_have_no_port() {
        assert_eq!(host("API.Example.COM").unwrap(), "api.example.com");
        assert!(host("").is_err() && host("user@h").is_err());
        let port = host("api.example.com:8443").unwrap_err();
        assert!(
            port.contains("has a port") && port.contains("\"api.example.com\""),
            "{port}"
        );
    }
}
