//! Printing the effective configuration (`--check`) in the config file's own vocabulary.
//!
//! The output is built from the same raw structs the file is read into, so it cannot drift
//! from what the file accepts. Every route is printed with every policy key, and the route
//! `default` as an ordinary `[[routes]]` table with prefix `/`, so loading the output gives the
//! same settings without any `[defaults]` or top-level `upstream`.

use crate::config::file::{unspanned, RawFile};
use crate::config::routes::print::route;
use crate::config::settings::Settings;
use sha2::{Digest, Sha256};
use toml::Spanned;

impl Settings {
    /// The effective configuration in the config file's own vocabulary, every route with every
    /// policy key spelled out. Loading it back gives the same settings.
    pub fn to_toml(&self) -> String {
        to_toml(self)
    }
}

/// The SHA-256 (hex) of the config as `--check` prints it: two configs with the same effect
/// have the same digest, whatever their layout or comments. `POST /reload` answers the same,
/// and the status page shows it.
pub fn config_digest(settings: &Settings) -> String {
    hex::encode(Sha256::digest(settings.to_toml().as_bytes()))
}

fn to_toml(settings: &Settings) -> String {
    let mut raw = RawFile {
        listen: unspanned(settings.listen.to_string()),
        admin_listen: settings.admin_listen.and_then(|a| unspanned(a.to_string())),
        store: unspanned(settings.store.to_string()),
        upstream: None,
        problem_base: unspanned(settings.problem_base.as_str().to_owned()),
        log_format: unspanned(settings.log_format),
        drain_timeout: unspanned(humane(settings.drain_timeout)),
        workers: unspanned(i64::try_from(settings.workers).unwrap_or(i64::MAX)),
        admin_token: settings
            .admin_token
            .as_ref()
            .and_then(|t| unspanned(t.reference().to_owned())),
        encryption_key: settings
            .encryption
            .as_ref()
            .and_then(|k| unspanned(k.current().reference().to_owned())),
        encryption_old_keys: settings.encryption.as_ref().map_or_else(Vec::new, |k| {
            k.old()
                .iter()
                .map(|o| Spanned::new(0..0, o.reference().to_owned()))
                .collect()
        }),
        tls_cert: settings
            .tls
            .as_ref()
            .and_then(|t| unspanned(t.cert_reference().to_owned())),
        tls_key: settings
            .tls
            .as_ref()
            .and_then(|t| unspanned(t.key_reference().to_owned())),
        defaults: None,
        routes: settings.routes.iter().map(route).collect(),
        outboxes: crate::config::outbox::print(&settings.outboxes),
        consumers: crate::config::consumer::print(&settings.consumers),
        ..RawFile::default()
    };
    crate::config::limits::print(&settings.limits, &mut raw);
    crate::config::store_keys::print(&settings.postgres, &mut raw);
    // Every value is a string, number, bool or array of them, which TOML can always represent.
    toml::to_string(&raw).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
}

pub(in crate::config) fn humane(duration: std::time::Duration) -> String {
    humantime::format_duration(duration).to_string()
}
