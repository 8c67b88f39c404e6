//! The Postgres store's keys (docs/reference.md#stores): `store_schema`, `store_pool_size`,
//! `store_statement_timeout` and `store_ca`, read into [`PostgresSettings`] and printed back.
//! Another store ignores them.

use crate::config::common::error::ConfigError;
use crate::config::common::source::Source;
use crate::config::common::values;
use crate::config::file::{unspanned, RawFile};
use crate::config::settings::Settings;
use crate::store::{DatabaseCa, PostgresSettings};

/// The longest name PostgreSQL keeps whole (`NAMEDATALEN - 1`).
const MAX_SCHEMA_LEN: usize = 63;

/// The keys the file sets, the defaults for the others.
pub(super) fn resolve(src: &Source, raw: &RawFile) -> Result<PostgresSettings, ConfigError> {
    let mut settings = PostgresSettings::default();
    if let Some(schema) = &raw.store_schema {
        settings.schema = Some(
            schema_name(schema.get_ref()).map_err(|why| src.bad(schema, "store_schema", why))?,
        );
    }
    if let Some(size) = &raw.store_pool_size {
        settings.pool_size = usize::try_from(*size.get_ref())
            .ok()
            .filter(|n| (1..=1024).contains(n))
            .ok_or_else(|| {
                let why = format!("{} is not a pool size from 1 to 1024", size.get_ref());
                src.bad(size, "store_pool_size", why)
            })?;
    }
    if let Some(timeout) = &raw.store_statement_timeout {
        settings.statement_timeout = values::duration(timeout.get_ref())
            .map_err(|why| src.bad(timeout, "store_statement_timeout", why))?;
    }
    if let Some(ca) = &raw.store_ca {
        let config = crate::tls::database_client_config(ca.get_ref())
            .map_err(|why| src.bad(ca, "store_ca", why))?;
        settings.ca = Some(DatabaseCa {
            reference: ca.get_ref().clone(),
            config,
        });
    }
    Ok(settings)
}

/// A schema name: any name PostgreSQL keeps whole; it is always quoted in SQL.
fn schema_name(raw: &str) -> Result<String, String> {
    if raw.is_empty() || raw.len() > MAX_SCHEMA_LEN || raw.contains('\0') {
        return Err(format!(
            "{raw:?} is not a schema name of 1 to {MAX_SCHEMA_LEN} bytes"
        ));
    }
    Ok(raw.to_owned())
}

/// Writes the keys that differ from their defaults, so a config that sets none prints none.
pub(super) fn print(settings: &PostgresSettings, raw: &mut RawFile) {
    let defaults = PostgresSettings::default();
    raw.store_schema = settings.schema.clone().and_then(unspanned);
    if settings.pool_size != defaults.pool_size {
        raw.store_pool_size = unspanned(i64::try_from(settings.pool_size).unwrap_or(i64::MAX));
    }
    if settings.statement_timeout != defaults.statement_timeout {
        let timeout = humantime::format_duration(settings.statement_timeout).to_string();
        raw.store_statement_timeout = unspanned(timeout);
    }
    raw.store_ca = settings
        .ca
        .as_ref()
        .and_then(|ca| unspanned(ca.reference.clone()));
}

/// The Postgres store's keys as `--check` prints them.
pub(super) fn store_keys(settings: &Settings) -> String {
    let mut raw = RawFile::default();
    print(&settings.postgres, &mut raw);
    toml::to_string(&raw).unwrap_or_default()
}

/// The two stores as shown (passwords masked), told apart when only a password changed.
pub(super) fn stores(running: &Settings, new: &Settings) -> (String, String) {
    let (was, now) = (running.store.to_string(), new.store.to_string());
    if running.store != new.store && was == now {
        return (was, format!("{now} (another password)"));
    }
    (was, now)
}

#[cfg(test)]
mod tests {
    use super::super::{load_str, Overrides};
    use super::*;
    use std::time::Duration;

    fn load(text: &str) -> Result<PostgresSettings, String> {
        let text = format!("upstream = \"http://127.0.0.1:9\"\n{text}");
        load_str("config.toml", &text, &Overrides::default())
            .map(|settings| settings.postgres)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_hold_until_the_file_sets_a_key() {
        assert_eq!(load("").unwrap(), PostgresSettings::default());
        let set = load(
            "store_schema = \"proxy\"\nstore_pool_size = 4\nstore_statement_timeout = \"500ms\"\n",
        )
        .unwrap();
        assert_eq!(set.schema.as_deref(), Some("proxy"));
        assert_eq!(set.pool_size, 4);
        assert_eq!(set.statement_timeout, Duration::from_millis(500));
        let text = "upstream = \"http://127.0.0.1:9\"\nstore_pool_size = 4\n";
        let printed = load_str("c.toml", text, &Overrides::default())
            .unwrap()
            .to_toml();
        assert!(printed.contains("store_pool_size = 4"), "{printed}");
        assert!(!printed.contains("store_statement_timeout"), "{printed}");
    }

    #[test]
    fn a_bad_value_names_its_key_and_line() {
        for (text, key) in [
            ("store_pool_size = 0\n", "store_pool_size"),
            (
                "store_statement_timeout = \"soon\"\n",
                "store_statement_timeout",
            ),
            ("store_schema = \"\"\n", "store_schema"),
            ("store_ca = \"file:/no/such/ca.pem\"\n", "store_ca"),
        ] {
            let refused = load(text).unwrap_err();
            let at = format!("config.toml:2: key \"{key}\"");
            assert!(refused.starts_with(&at), "{text}: {refused}");
        }
    }
}
