//! Why an outbox operation failed, keeping what the database said (its SQLSTATE, the client's
//! error as the source), and naming it as an operator acts on it: a timeout, a serialization
//! failure, a refusal, a server gone.

use std::time::Duration;

use idempotency_postgres::tokio_postgres::error::SqlState;
use idempotency_postgres::{tokio_postgres, ConnectError, Failure, PoolError};

use crate::table::TableProblems;

/// Why an outbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    /// A statement failed, or the connection it ran on did.
    #[error("database {}: {}", Failure::of(.0), describe(.0))]
    Database(#[source] tokio_postgres::Error),
    /// No connection could be had from the pool.
    #[error("database {}: no connection: {}", pool_failure(.0), .0)]
    Pool(#[source] PoolError),
    /// The pool could not be built (its TLS, its settings).
    #[error("database: {0}")]
    Connect(#[source] ConnectError),
    /// The database did not answer within the call's deadline: it may be frozen, or the path
    /// to it drops packets.
    #[error("database timeout: no answer within {0:?}")]
    Deadline(Duration),
    /// The table lacks what the relay needs, or has it with other types.
    #[error("{0}")]
    Table(TableProblems),
}

impl OutboxError {
    /// What happened, as the relay's log names it.
    pub fn failure(&self) -> Failure {
        match self {
            OutboxError::Database(e) => Failure::of(e),
            OutboxError::Pool(e) => pool_failure(e),
            OutboxError::Deadline(_) => Failure::Timeout,
            OutboxError::Connect(_) | OutboxError::Table(_) => Failure::Other,
        }
    }

    /// The server's SQLSTATE, when the server answered with an error.
    pub fn sqlstate(&self) -> Option<&SqlState> {
        match self {
            OutboxError::Database(e) => e.code(),
            OutboxError::Pool(PoolError::Backend(e)) => e.code(),
            _ => None,
        }
    }
}

/// The server's own message (and its severity) says more than the client's summary.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => error.to_string(),
    }
}

fn pool_failure(error: &PoolError) -> Failure {
    match error {
        PoolError::Backend(e) => Failure::of(e),
        PoolError::Timeout(_) => Failure::Timeout,
        _ => Failure::Gone,
    }
}

impl From<tokio_postgres::Error> for OutboxError {
    fn from(error: tokio_postgres::Error) -> Self {
        OutboxError::Database(error)
    }
}

impl From<PoolError> for OutboxError {
    fn from(error: PoolError) -> Self {
        OutboxError::Pool(error)
    }
}
