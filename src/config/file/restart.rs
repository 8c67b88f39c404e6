//! What a reload may not change (docs/reference.md#reload): the addresses the proxy listens on, its
//! store (and the Postgres store's keys), whether its listener speaks HTTPS, its log format and its number of workers. Each is
//! bound once at start (a socket, an open store, the listener's protocol, the process's log
//! writer, the serving threads), so a new value
//! could only be pretended to: a reload that changes one is refused, naming the key and its
//! line, and the running config stays. So do the outbox relays, which hold their database and
//! their leases from the start, and whether the process serves routes at all.

use std::ops::Range;

use crate::config::common::error::ConfigError;
use crate::config::common::source::Source;
use crate::config::file::RawFile;
use crate::config::settings::Settings;

/// Where the new file sets each of those keys, for the refusal's line.
pub(in crate::config) struct Positions {
    listen: Option<Range<usize>>,
    admin_listen: Option<Range<usize>>,
    store: Option<Range<usize>>,
    store_keys: Option<Range<usize>>,
    tls_cert: Option<Range<usize>>,
    log_format: Option<Range<usize>>,
    workers: Option<Range<usize>>,
    outboxes: Option<Range<usize>>,
    routes: Option<Range<usize>>,
}

impl Positions {
    pub(in crate::config) fn of(raw: &RawFile) -> Self {
        Self {
            listen: raw.listen.as_ref().map(toml::Spanned::span),
            admin_listen: raw.admin_listen.as_ref().map(toml::Spanned::span),
            store: raw.store.as_ref().map(toml::Spanned::span),
            store_keys: [
                raw.store_schema.as_ref().map(toml::Spanned::span),
                raw.store_pool_size.as_ref().map(toml::Spanned::span),
                raw.store_statement_timeout
                    .as_ref()
                    .map(toml::Spanned::span),
                raw.store_ca.as_ref().map(toml::Spanned::span),
            ]
            .into_iter()
            .flatten()
            .next(),
            tls_cert: raw.tls_cert.as_ref().map(toml::Spanned::span),
            log_format: raw.log_format.as_ref().map(toml::Spanned::span),
            workers: raw.workers.as_ref().map(toml::Spanned::span),
            outboxes: raw.outboxes.first().map(toml::Spanned::span),
            routes: raw.routes.first().map(toml::Spanned::span),
        }
    }
}

fn serving(settings: &Settings) -> &'static str {
    if settings.routes.is_empty() {
        "a relay-only process"
    } else {
        "routes"
    }
}

/// Refuses `new` if it changes a key only a restart can change from what `running` has.
pub(in crate::config) fn unchanged(
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
    let (was_store, now_store) = crate::config::store_keys::stores(running, new);
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
        ("store", &at.store, was_store, now_store),
        // The Postgres store's pool and tables are made once, at start.
        (
            "store_schema",
            &at.store_keys,
            crate::config::store_keys::store_keys(running),
            crate::config::store_keys::store_keys(new),
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
        // A relay-only process binds no listener.
        (
            "routes",
            &at.routes,
            serving(running).to_owned(),
            serving(new).to_owned(),
        ),
    ];
    // Each relay holds its database, its leases and its drain from the start.
    let (was, now) = (
        crate::config::outbox::restart::outboxes(running),
        crate::config::outbox::restart::outboxes(new),
    );
    if was.0 != now.0 {
        let span = at.outboxes.clone().unwrap_or(0..0);
        let reason = format!(
            "key \"outboxes\": {} -> {} (or their keys) needs a restart; the running config stays",
            was.1, now.1
        );
        return Err(src.at(span, Some("outboxes"), reason));
    }
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
