//! PostgreSQL connections as every part of idempotency-proxy makes them: the Postgres store, the
//! outbox relay, and a Rust application that embeds either.
//!
//! - [`DatabaseUrl`]: a `postgres://` or `postgresql://` URL, given inline or by reference
//!   (`env:NAME`, `file:PATH`) so that a password never sits in a config file or a process list;
//!   shown only with its password hidden.
//! - [`ConnectOptions`] and [`pool`]: a `deadpool-postgres` pool whose connections carry a
//!   statement timeout and an application name, over TLS through rustls when the URL asks for it
//!   (`sslmode=require`; never OpenSSL).
//! - [`Listener`]: one connection of its own, outside any pool, for `LISTEN`: a pooled
//!   connection goes back to the pool between uses, and would take its `LISTEN` with it.

mod failure;
mod listen;
mod options;
mod sql;
mod tls;
mod url;

pub use deadpool_postgres::{Object, Pool, PoolError, Transaction};
pub use failure::Failure;
pub use listen::Listener;
pub use options::{pool, ConnectOptions};
pub use sql::{quote_identifier, quote_qualified};
pub use tokio_postgres;
pub use url::DatabaseUrl;

/// Why a connection, or the pool that makes them, could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL, or the reference that should hold one, was refused.
    #[error("database URL: {0}")]
    Url(String),
    /// The TLS configuration could not be built.
    #[error("database TLS: {0}")]
    Tls(String),
    /// The pool could not be built.
    #[error("database pool: {0}")]
    Pool(String),
    /// The database refused or dropped the connection.
    #[error("database connection: {0}")]
    Database(#[from] tokio_postgres::Error),
}
