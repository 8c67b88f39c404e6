//! A PostgreSQL store for [`idempotency_core`]: idempotency records and inbox queues in the
//! database a team already runs, shared by any number of proxy replicas.
//!
//! [`PostgresStore::connect`] opens a pool (`idempotency-postgres` makes the connections: the
//! URL, TLS through rustls, statement and connect time-outs), creates the tables when they are
//! missing and refuses tables of another layout (`schema.rs`). Every operation is one
//! statement, so one round trip and one transaction (`statements.rs` says how each stays
//! atomic); an operation is acknowledged once it is committed. Reservations and completions
//! that meet on their way to the database share one statement (`batch.rs`). Expired records are purged in
//! the background, a range of pages at a time, never waiting on a request (`purge.rs`).
//!
//! ```no_run
//! use std::sync::Arc;
//! use idempotency_core::{IdempotencyLayer, Policy};
//! use idempotency_postgres::{ConnectOptions, DatabaseUrl};
//! use idempotency_postgres_store::PostgresStore;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let url = DatabaseUrl::resolve("postgres://app@127.0.0.1:5432/app")?;
//! let store = PostgresStore::connect(&url, &ConnectOptions::default(), None).await?;
//! let policy = Policy::builder("payments").build()?;
//! let layer = IdempotencyLayer::new(Arc::new(store), policy);
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

mod batch;
mod inbox;
mod purge;
mod schema;
mod statements;
mod store;

pub use schema::{DELIVERIES_TABLE, RECORDS_TABLE};
pub use store::PostgresStore;
