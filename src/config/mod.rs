//! The proxy's configuration: the config file (docs/reference.md#config-file) and the command line (docs/reference.md#command-line)
//! merged into one validated [`Settings`].
//!
//! Everything is checked before anything starts, and every problem is reported as one line that
//! names the file, the line and the key (or the flag), so an operator can fix it at once.
//!
//! Each subject owns its keys as written, their resolution into settings, their printing for
//! `--check` and what a reload may not change of them: `file/` the file as a whole and its
//! top-level keys (and assembling the rest), `routes/` the `[defaults]` and `[[routes]]`
//! tables (with the inbox keys), `outbox/` the `[[outboxes]]` tables, `consumer/` the `[[consumers]]` tables, `tls.rs`, `limits.rs`,
//! `store_keys.rs` and `crypto.rs` theirs. `common/` is what they share: the text and its
//! positions, the one-line error, single values and their units, and where a value was given.

mod common;
mod consumer;
mod crypto;
mod file;
mod limits;
mod outbox;
mod routes;
mod settings;
mod store_keys;
mod tls;

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;

pub use crate::tls::{ListenerTls, UpstreamTls};
pub use common::error::ConfigError;
pub use file::print::config_digest;
pub use settings::{
    BrokerSource, ConsumerConfig, Limits, LogFormat, OutboxSettings, Overrides, RouteSettings,
    Settings, DEFAULT_LISTEN,
};

/// Reads the config file the overrides name (if any) and merges the overrides over it.
pub fn load(overrides: &Overrides) -> Result<Settings, ConfigError> {
    let (origin, text) = read(overrides)?;
    load_str(&origin, &text, overrides)
}

/// Like [`load`], for config text that did not come from a file; `origin` names it in errors.
pub fn load_str(origin: &str, text: &str, overrides: &Overrides) -> Result<Settings, ConfigError> {
    let source = common::source::Source::new(origin, text);
    let raw = source.parse()?;
    file::resolve::resolve(&source, raw, overrides)
}

/// Like [`load`], for a reload of a proxy running `running` (docs/reference.md#reload): a config that
/// changes `listen`, `admin_listen`, `store`, whether the listener speaks HTTPS, or
/// `log_format` is refused, as only a restart can change those.
pub fn load_for_reload(overrides: &Overrides, running: &Settings) -> Result<Settings, ConfigError> {
    let (origin, text) = read(overrides)?;
    let source = common::source::Source::new(&origin, &text);
    let raw = source.parse()?;
    let positions = file::restart::Positions::of(&raw);
    let settings = file::resolve::resolve(&source, raw, overrides)?;
    file::restart::unchanged(&source, &positions, running, &settings)?;
    Ok(settings)
}

/// The config file's name and text; no file reads as an empty one.
fn read(overrides: &Overrides) -> Result<(String, String), ConfigError> {
    let Some(path) = &overrides.config else {
        return Ok(("(no config file)".to_owned(), String::new()));
    };
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: origin.clone(),
        reason: e.to_string(),
    })?;
    Ok((origin, text))
}
