//! The proxy's configuration: the config file (docs/reference.md#config-file) and the command line (docs/reference.md#command-line)
//! merged into one validated [`Settings`].
//!
//! Everything is checked before anything starts, and every problem is reported as one line that
//! names the file, the line and the key (or the flag), so an operator can fix it at once.
//!
//! The file is read into raw structs that keep every value's position (`file.rs`, `source.rs`),
//! then resolved into settings (`resolve.rs`, with `policy.rs` for route keys, `limits.rs`,
//! `crypto.rs`); `print.rs` writes settings back in the file's vocabulary for `--check`.

mod consumer;
mod crypto;
mod error;
mod file;
mod given;
mod inbox;
mod limits;
mod outbox;
mod policy;
mod print;
mod resolve;
mod restart;
mod settings;
mod source;
mod store_keys;
mod tls;
mod values;

#[cfg(test)]
mod error_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;

pub use crate::tls::{ListenerTls, UpstreamTls};
pub use error::ConfigError;
pub use print::config_digest;
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
    let source = source::Source::new(origin, text);
    let raw = source.parse()?;
    resolve::resolve(&source, raw, overrides)
}

/// Like [`load`], for a reload of a proxy running `running` (docs/reference.md#reload): a config that
/// changes `listen`, `admin_listen`, `store`, whether the listener speaks HTTPS, or
/// `log_format` is refused, as only a restart can change those.
pub fn load_for_reload(overrides: &Overrides, running: &Settings) -> Result<Settings, ConfigError> {
    let (origin, text) = read(overrides)?;
    let source = source::Source::new(&origin, &text);
    let raw = source.parse()?;
    let positions = restart::Positions::of(&raw);
    let settings = resolve::resolve(&source, raw, overrides)?;
    restart::unchanged(&source, &positions, running, &settings)?;
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
#[cfg(test)]
mod inbox_tests;
#[cfg(test)]
mod outbox_tests;
