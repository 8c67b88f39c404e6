//! What a reload may not change (docs/reference.md#reload): the addresses the proxy listens on, its
//! store, whether its listener speaks HTTPS, its log format and its number of workers. Each is
//! bound once at start (a socket, an open store, the listener's protocol, the process's log
//! writer, the serving threads), so a new value
//! could only be pretended to: a reload that changes one is refused, naming the key and its
//! line, and the running config stays.

use std::ops::Range;

use super::error::ConfigError;
use super::file::RawFile;
use super::settings::Settings;
use super::source::Source;

/// Where the new file sets each of those keys, for the refusal's line.
pub(super) struct Positions {
    listen: Option<Range<usize>>,
    admin_listen: Option<Range<usize>>,
    store: Option<Range<usize>>,
    tls_cert: Option<Range<usize>>,
    log_format: Option<Range<usize>>,
    workers: Option<Range<usize>>,
}

impl Positions {
    pub(super) fn of(raw: &RawFile) -> Self {
        Self {
            listen: raw.listen.as_ref().map(toml::Spanned::span),
            admin_listen: raw.admin_listen.as_ref().map(toml::Spanned::span),
            store: raw.store.as_ref().map(toml::Spanned::span),
            tls_cert: raw.tls_cert.as_ref().map(toml::Spanned::span),
            log_format: raw.log_format.as_ref().map(toml::Spanned::span),
            workers: raw.workers.as_ref().map(toml::Spanned::span),
        }
    }
}

/// Refuses `new` if it changes a key only a restart can change from what `running` has.
pub(super) fn unchanged(
    src: &Source,
    at: &Positions,
    running: &Settings,
    new: &Settings,
) -> Result<(), ConfigError> {
    let address = |a: Option<std::net::SocketAddr>| a.map_or("off".to_owned(), |a| a.to_string());
    let protocol = |s: &Settings| {
        if s.tls.is_some() {
            "HTTPS"
        } else {
            "plain HTTP"
        }
    };
    let keys = [
        (
            "listen",
            &at.listen,
            running.listen.to_string(),
            new.listen.to_string(),
        ),
        (
            "admin_listen",
            &at.admin_listen,
            address(running.admin_listen),
            address(new.admin_listen),
        ),
        (
            "store",
            &at.store,
            running.store.to_string(),
            new.store.to_string(),
        ),
        (
            "tls_cert",
            &at.tls_cert,
            protocol(running).to_owned(),
            protocol(new).to_owned(),
        ),
        (
            "log_format",
            &at.log_format,
            format!("{:?}", running.log_format).to_lowercase(),
            format!("{:?}", new.log_format).to_lowercase(),
        ),
        (
            "workers",
            &at.workers,
            running.workers.to_string(),
            new.workers.to_string(),
        ),
    ];
    for (key, span, was, now) in keys {
        if was != now {
            // A key taken out of the file has no line of its own; the refusal points at the top.
            let span = span.clone().unwrap_or(0..0);
            let reason =
                format!("key {key:?}: {was} -> {now} needs a restart; the running config stays");
            return Err(src.at(span, Some(key), reason));
        }
    }
    Ok(())
}
