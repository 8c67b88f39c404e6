//! The database's URL: parsed once, kept whole for the client, and shown without its password.

use std::fmt;
use std::str::FromStr;

use idempotency_delivery::Secret;
use tokio_postgres::config::Host;

use crate::ConnectError;

/// A PostgreSQL URL, read from the config's value: the URL itself, or `env:NAME` / `file:PATH`
/// holding it.
#[derive(Clone)]
pub struct DatabaseUrl {
    config: tokio_postgres::Config,
    shown: String,
}

impl DatabaseUrl {
    /// Reads `value`: a `postgres://` or `postgresql://` URL, or a reference to one.
    ///
    /// ```
    /// use idempotency_postgres::DatabaseUrl;
    ///
    /// let url = DatabaseUrl::resolve("postgres://app:s3cret@db.internal:5432/payments").unwrap();
    /// assert_eq!(url.to_string(), "postgres://app@db.internal:5432/payments");
    /// assert!(DatabaseUrl::resolve("mysql://db").is_err());
    /// ```
    pub fn resolve(value: &str) -> Result<Self, ConnectError> {
        if value.starts_with("env:") || value.starts_with("file:") {
            let secret = Secret::resolve(value).map_err(|e| {
                // The URL's error keeps its words as text; the secret's cause goes with them.
                let cause = std::error::Error::source(&e).map(|c| format!(": {c}"));
                ConnectError::Url(format!("{e}{}", cause.unwrap_or_default()))
            })?;
            let text = String::from_utf8(secret.expose().to_vec())
                .map_err(|_| ConnectError::Url(format!("{value} does not hold UTF-8 text")))?;
            return Self::parse(text.trim()).map_err(|e| match e {
                ConnectError::Url(why) => ConnectError::Url(format!("{why} (read from {value})")),
                other => other,
            });
        }
        Self::parse(value)
    }

    fn parse(url: &str) -> Result<Self, ConnectError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(ConnectError::Url(
                "expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=require], or env:NAME / file:PATH holding one".to_owned(),
            ));
        }
        // The client's own message may quote the URL, password and all: say only what it is.
        let config = tokio_postgres::Config::from_str(url)
            .map_err(|_| ConnectError::Url("not a valid postgres:// URL".to_owned()))?;
        if config.get_hosts().is_empty() {
            return Err(ConnectError::Url("the URL names no host".to_owned()));
        }
        let shown = shown(&config);
        Ok(Self { config, shown })
    }

    /// The client's configuration.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }
}

/// `postgres://USER@HOST:PORT/DATABASE`: what may appear in logs, `--check` and the status page.
fn shown(config: &tokio_postgres::Config) -> String {
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            let ports = config.get_ports();
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            format!("{name}:{port}")
        })
        .collect();
    let database = config.get_dbname().unwrap_or_default();
    format!("postgres://{user}{}/{database}", hosts.join(","))
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown() {
        let url = DatabaseUrl::resolve("postgresql://u:hunter2@h:6000/d?sslmode=require").unwrap();
        assert_eq!(url.to_string(), "postgres://u@h:6000/d");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert_eq!(url.config().get_password(), Some(&b"hunter2"[..]));
    }

    #[test]
    fn a_refusal_never_quotes_the_url() {
        let refused = DatabaseUrl::resolve("postgres://u:hunter2@h:notaport/d").unwrap_err();
        assert!(!refused.to_string().contains("hunter2"), "{refused}");
    }

    #[test]
    fn reads_a_reference() {
        // A file, not a variable: the environment is shared by every test thread.
        let path = std::env::temp_dir().join(format!("postgres-url-{}", std::process::id()));
        std::fs::write(&path, "postgres://u:p@h/d\n").unwrap();
        let url = DatabaseUrl::resolve(&format!("file:{}", path.display())).unwrap();
        assert_eq!(url.to_string(), "postgres://u@h:5432/d");
        let refused = DatabaseUrl::resolve("env:IDEMPOTENCY_POSTGRES_NO_SUCH").unwrap_err();
        assert!(refused.to_string().contains("not set"), "{refused}");
    }

    #[test]
    fn refuses_what_is_not_postgres() {
        for value in ["redis://h", "", "postgres://", "h:5432"] {
            assert!(DatabaseUrl::resolve(value).is_err(), "{value}");
        }
    }
}
