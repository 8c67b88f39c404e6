//! The top-level limits on what one client may cost: `header_read_timeout`,
//! `max_header_bytes` and `max_connections`, read into [`Limits`] and printed back.

use crate::config::common::error::ConfigError;
use crate::config::common::source::Source;
use crate::config::common::values;
use crate::config::file::{unspanned, RawFile};
use crate::config::settings::Limits;
use idempotency_core::policy::ByteSize;

/// The limits the file sets, the defaults for the others.
pub(super) fn resolve(src: &Source, raw: &RawFile) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    if let Some(timeout) = &raw.header_read_timeout {
        limits.header_read_timeout = values::duration(timeout.get_ref())
            .map_err(|reason| src.bad(timeout, "header_read_timeout", reason))?;
    }
    if let Some(size) = &raw.max_header_bytes {
        limits.max_header_bytes = header_bytes(*size.get_ref())
            .map_err(|reason| src.bad(size, "max_header_bytes", reason))?;
    }
    if let Some(count) = &raw.max_connections {
        limits.max_connections = connections(*count.get_ref())
            .map_err(|reason| src.bad(count, "max_connections", reason))?;
    }
    Ok(limits)
}

/// hyper cannot read HTTP/1 with a smaller buffer, and HTTP/2 states the limit as a `u32`.
fn header_bytes(size: ByteSize) -> Result<ByteSize, String> {
    let max = ByteSize::bytes(u64::from(u32::MAX));
    if size < Limits::MIN_HEADER_BYTES || size > max {
        return Err(format!(
            "size {size} is outside {}..={max}",
            Limits::MIN_HEADER_BYTES
        ));
    }
    Ok(size)
}

/// Zero would never serve anyone; the semaphore holding the slots caps the count.
fn connections(count: i64) -> Result<usize, String> {
    usize::try_from(count)
        .ok()
        .filter(|n| (1..=tokio::sync::Semaphore::MAX_PERMITS).contains(n))
        .ok_or_else(|| format!("{count} is not a number of connections of at least 1"))
}

/// Writes the limits into the file's own keys.
pub(super) fn print(limits: &Limits, raw: &mut RawFile) {
    let timeout = humantime::format_duration(limits.header_read_timeout).to_string();
    raw.header_read_timeout = unspanned(timeout);
    raw.max_header_bytes = unspanned(limits.max_header_bytes);
    raw.max_connections = unspanned(i64::try_from(limits.max_connections).unwrap_or(i64::MAX));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{load_str, Overrides, Settings};
    use super::*;

    const UPSTREAM: &str = "upstream = \"http://127.0.0.1:9000\"\n";

    fn load(lines: &str) -> Result<Settings, ConfigError> {
        let text = format!("{UPSTREAM}{lines}\n");
        load_str("config.toml", &text, &Overrides::default())
    }

    #[test]
    fn absent_limits_are_the_defaults() {
        let limits = load("").unwrap().limits;
        assert_eq!(limits, Limits::default());
        assert_eq!(limits.header_read_timeout, Duration::from_secs(10));
        assert_eq!(limits.max_header_bytes, ByteSize::kib(64));
        assert_eq!(limits.max_connections, 10_000);
    }

    #[test]
    fn set_limits_are_kept_and_printed_back() {
        let settings =
            load("header_read_timeout = \"2s\"\nmax_header_bytes = \"16KiB\"\nmax_connections = 3")
                .unwrap();
        let want = Limits {
            header_read_timeout: Duration::from_secs(2),
            max_header_bytes: ByteSize::kib(16),
            max_connections: 3,
        };
        assert_eq!(settings.limits, want);
        let printed = settings.to_toml();
        assert!(printed.contains("max_connections = 3"), "{printed}");
        let again = load_str("printed.toml", &printed, &Overrides::default()).unwrap();
        assert_eq!(again.limits, want);
    }

    #[test]
    fn bad_limits_name_their_line_and_key() {
        for (line, key) in [
            ("header_read_timeout = \"0s\"", "header_read_timeout"),
            ("header_read_timeout = \"soon\"", "header_read_timeout"),
            ("max_header_bytes = \"1KiB\"", "max_header_bytes"),
            ("max_header_bytes = \"8GiB\"", "max_header_bytes"),
            ("max_connections = 0", "max_connections"),
            ("max_connections = -5", "max_connections"),
        ] {
            let message = load(line).unwrap_err().to_string();
            assert!(
                message.starts_with(&format!("config.toml:2: key \"{key}\"")),
                "{line}: {message}"
            );
        }
    }
}
