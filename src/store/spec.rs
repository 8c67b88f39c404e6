//! Parsing the `--store` / `store =` value (docs/reference.md#stores) into a backend choice.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Which backend to open, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`.
    Memory,
    /// `file:PATH`.
    File(PathBuf),
    /// `redis://` or `rediss://`, kept whole for the client to parse.
    Redis(String),
    /// `redis+cluster://HOST:PORT[,HOST:PORT...]`, as one `redis://` URL per seed node.
    RedisCluster(Vec<String>),
    /// `postgres://` or `postgresql://`, or `env:NAME` / `file:PATH` holding one, as written:
    /// resolved again when the store is opened.
    Postgres(String),
}

/// Why a store value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreSpecError(String);

impl StoreSpec {
    /// The store's kind, safe to show anywhere: the spec itself may carry a password.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSpec::Memory => "memory",
            StoreSpec::File(_) => "file",
            StoreSpec::Redis(_) => "redis",
            StoreSpec::RedisCluster(_) => "redis-cluster",
            StoreSpec::Postgres(_) => "postgres",
        }
    }
}

impl Default for StoreSpec {
    fn default() -> Self {
        StoreSpec::File(PathBuf::from("idempotency-proxy.db"))
    }
}

impl FromStr for StoreSpec {
    type Err = StoreSpecError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        if raw == "memory" {
            return Ok(StoreSpec::Memory);
        }
        let postgres = raw.starts_with("postgres://") || raw.starts_with("postgresql://");
        let reference = raw.starts_with("env:")
            || raw
                .strip_prefix("file:")
                .is_some_and(super::postgres::holds_url);
        if postgres || reference {
            return match idempotency_postgres::DatabaseUrl::resolve(raw) {
                Ok(_) => Ok(StoreSpec::Postgres(raw.to_owned())),
                Err(e) => Err(StoreSpecError(e.to_string())),
            };
        }
        if let Some(path) = raw.strip_prefix("file:") {
            if path.is_empty() {
                return Err(StoreSpecError("file store needs a path: file:PATH".into()));
            }
            return Ok(StoreSpec::File(PathBuf::from(path)));
        }
        if raw.starts_with("redis://") || raw.starts_with("rediss://") {
            return Ok(StoreSpec::Redis(raw.to_owned()));
        }
        if let Some(nodes) = raw.strip_prefix("redis+cluster://") {
            let nodes: Vec<String> = nodes
                .split(',')
                .map(|n| format!("redis://{}", n.trim()))
                .collect();
            if nodes.iter().any(|n| n.len() == "redis://".len()) {
                return Err(StoreSpecError(
                    "redis+cluster:// needs HOST:PORT[,HOST:PORT...]".into(),
                ));
            }
            return Ok(StoreSpec::RedisCluster(nodes));
        }
        Err(StoreSpecError(format!(
            "unknown store {:?}: expected memory, file:PATH, redis://HOST:PORT[/DB], rediss://…, redis+cluster://HOST:PORT[,…], postgres://USER@HOST:PORT/DB or env:NAME holding one",
            masked(raw)
        )))
    }
}

/// The value with its URL's password replaced by `***`, the rest as written: how a store is
/// shown in `--check`, log lines and refusals, since a Redis or Postgres URL may carry its
/// password inline. `env:NAME` and `file:PATH` references carry none and stay as they are.
fn masked(value: &str) -> String {
    let (scheme, rest) = value.split_once("://").unwrap_or(("", value));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return value.to_owned();
    };
    let Some((user, _password)) = userinfo.split_once(':') else {
        return value.to_owned();
    };
    let scheme = if scheme.is_empty() {
        String::new()
    } else {
        format!("{scheme}://")
    };
    format!("{scheme}{user}:***@{host}{tail}")
}

/// Shown with any password masked as `***`; the variants keep the value whole for opening.
impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::File(path) => write!(f, "file:{}", path.display()),
            StoreSpec::Redis(url) | StoreSpec::Postgres(url) => f.write_str(&masked(url)),
            StoreSpec::RedisCluster(nodes) => {
                let hosts: Vec<String> = nodes
                    .iter()
                    .map(|n| masked(n.trim_start_matches("redis://")))
                    .collect();
                write!(f, "redis+cluster://{}", hosts.join(","))
            }
        }
    }
}

impl serde::Serialize for StoreSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for StoreSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_prints_it_back() {
        for raw in [
            "memory",
            "file:/var/lib/idem.db",
            "redis://127.0.0.1:6379/2",
            "rediss://h:6380",
            "redis+cluster://a:1,b:2",
            "postgres://app@db:5432/app?sslmode=require",
            "postgresql://app@db/app",
        ] {
            let spec: StoreSpec = raw.parse().unwrap();
            assert_eq!(spec.to_string(), raw);
        }
        assert_eq!(
            "redis+cluster://a:1,b:2".parse::<StoreSpec>().unwrap(),
            StoreSpec::RedisCluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
    }

    #[test]
    fn refuses_unknown_or_empty() {
        for raw in [
            "",
            "postgres://",
            "env:IDEMPOTENCY_PROXY_NO_SUCH_VARIABLE",
            "mysql://x",
            "file:",
            "redis+cluster://",
            "redis+cluster://a:1,,b:2",
        ] {
            assert!(raw.parse::<StoreSpec>().is_err(), "{raw}");
        }
    }

    #[test]
    fn a_file_holding_a_postgres_url_names_the_postgres_store() {
        let path = std::env::temp_dir().join(format!("store-url-{}", std::process::id()));
        std::fs::write(&path, "postgres://app:secret@db:5432/app\n").unwrap();
        let raw = format!("file:{}", path.display());
        let spec: StoreSpec = raw.parse().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(spec, StoreSpec::Postgres(raw));
        assert_eq!(spec.kind(), "postgres");
        let missing: StoreSpec = "file:/no/such/store.db".parse().unwrap();
        assert_eq!(missing.kind(), "file");
    }

    #[test]
    fn a_password_is_shown_masked() {
        for (raw, shown) in [
            (
                "postgres://app:hunter2@db:5432/app?sslmode=require",
                "postgres://app:***@db:5432/app?sslmode=require",
            ),
            ("redis://:hunter2@h:6379/2", "redis://:***@h:6379/2"),
            ("rediss://u:hunter2@h", "rediss://u:***@h"),
            (
                "redis+cluster://:hunter2@a:1,:hunter2@b:2",
                "redis+cluster://:***@a:1,:***@b:2",
            ),
            ("postgres://app@db/app", "postgres://app@db/app"),
        ] {
            let spec: StoreSpec = raw.parse().unwrap();
            assert_eq!(spec.to_string(), shown);
        }
        let refused = "mysql://u:hunter2@h".parse::<StoreSpec>().unwrap_err();
        assert!(!refused.to_string().contains("hunter2"), "{refused}");
    }

    #[test]
    fn default_is_the_file_store() {
        assert_eq!(
            StoreSpec::default().to_string(),
            "file:idempotency-proxy.db"
        );
    }
}
