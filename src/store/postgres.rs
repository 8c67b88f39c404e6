//! The Postgres store as the proxy opens it: its URL from `store` (inline, `env:NAME`, or a
//! `file:PATH` holding one) and its own keys, `store_schema`, `store_pool_size`,
//! `store_statement_timeout` and `store_ca` (docs/reference.md#stores).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idempotency_postgres::{ConnectOptions, DatabaseUrl};
pub use idempotency_postgres_store::PostgresStore;
use rustls::ClientConfig;

use crate::store::StoreError;

/// The Postgres store's keys, with their defaults when the file sets none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresSettings {
    /// The schema of the store's tables (`store_schema`); the connection's current schema
    /// (`public`, as a rule) when `None`.
    pub schema: Option<String>,
    /// The most connections a proxy holds open to the database (`store_pool_size`).
    pub pool_size: usize,
    /// How long one statement may run before the database cancels it
    /// (`store_statement_timeout`); the request then gets the `on_store_error` answer.
    pub statement_timeout: Duration,
    /// CAs trusted for the database's certificate besides the platform's (`store_ca`).
    pub ca: Option<DatabaseCa>,
}

/// `store_ca`: the reference as written (`file:PATH`), and the TLS client config built from it
/// when the config was loaded.
#[derive(Clone)]
pub struct DatabaseCa {
    /// The reference, as `--check` prints it.
    pub reference: String,
    /// The platform's roots and the bundle's CAs.
    pub config: Arc<ClientConfig>,
}

impl PartialEq for DatabaseCa {
    fn eq(&self, other: &Self) -> bool {
        self.reference == other.reference
    }
}

impl Eq for DatabaseCa {}

impl fmt::Debug for DatabaseCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseCa({})", self.reference)
    }
}

impl PostgresSettings {
    /// `store_pool_size` when the file sets none.
    pub const DEFAULT_POOL_SIZE: usize = 16;
    /// `store_statement_timeout` when the file sets none.
    pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(2);
}

impl Default for PostgresSettings {
    fn default() -> Self {
        Self {
            schema: None,
            pool_size: Self::DEFAULT_POOL_SIZE,
            statement_timeout: Self::DEFAULT_STATEMENT_TIMEOUT,
            ca: None,
        }
    }
}

/// Whether `path` (of a `file:PATH` store value) holds a Postgres URL rather than being a file
/// store: a file store's file never starts with one.
pub(crate) fn holds_url(path: &str) -> bool {
    let Ok(text) = std::fs::read(path) else {
        return false;
    };
    let start = text.trim_ascii_start();
    start.starts_with(b"postgres://") || start.starts_with(b"postgresql://")
}

/// Opens the store `value` names with `settings`.
pub(crate) async fn open(
    value: &str,
    settings: &PostgresSettings,
) -> Result<PostgresStore, StoreError> {
    let url = DatabaseUrl::resolve(value).map_err(|e| StoreError::open_from("PostgreSQL", e))?;
    let tls = settings.ca.as_ref().map(|ca| ca.config.clone());
    let options = ConnectOptions {
        pool_size: settings.pool_size,
        statement_timeout: settings.statement_timeout,
        application_name: "idempotency-proxy store".to_owned(),
        tls,
        ..ConnectOptions::default()
    };
    PostgresStore::connect(&url, &options, settings.schema.as_deref()).await
}
