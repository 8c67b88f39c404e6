//! The transactional outbox over PostgreSQL, delivered over HTTP, to NATS JetStream or to
//! RabbitMQ.
//!
//! An application that must both change its state and tell another service (a payment
//! confirmed, so fulfilment must ship) inserts the event into an outbox table **in the same
//! transaction** as the business change ([`enqueue`]). A relay ([`Relay`], started by
//! [`Outbox::start_relay`]) delivers the committed rows afterwards, and marks each delivered
//! only once the receiver answered `2xx`. Nothing committed is lost, nothing rolled back is
//! sent; a relay that dies between the receiver's yes and its mark sends the row again, with
//! the same `Idempotency-Key` (the row's id), which an idempotent receiver (or
//! idempotency-proxy in front of it) turns into a replay.
//!
//! - [`schema_sql`]: the table, its indexes, and the triggers that keep each aggregate's
//!   `seq` in commit order and (optionally) wake the relay on every insert.
//! - [`Outbox`]: one table and its database: the start-up check ([`Outbox::check_table`]),
//!   the counts (exact, or bounded for the gauges: [`Outbox::gauges`]), the dead rows,
//!   retrying or deleting one.
//! - [`Relay`]: claims due rows with a lease, publishes each through its destination's
//!   [`Publisher`] (HTTP through a [`Transport`], any HTTP client; JetStream and RabbitMQ
//!   through [`destination::nats`] and [`destination::amqp`]) outside any transaction, writes the outcome fenced by its claim, retries with
//!   backoff, keeps each aggregate's rows in order, and drains on request.
//!
//! The relay runs on a tokio runtime; [`Outbox::start_relay`] must be called within one.
#![forbid(unsafe_code)]

mod bulk;
mod config;
pub mod destination;
mod enqueue;
mod error;
mod gauges;
mod metrics;
mod migrate;
mod names;
mod outbox;
mod relay;
mod row;
mod schema;
mod sql;
mod table;
mod transport;
mod verdict;

pub use bulk::DeadFilter;
pub use config::{check_destination_concurrency, destination, OnDead, OutboxConfig, LEASE_MARGIN};
pub use destination::{
    duplicate_window_warnings, redacted, Delivery, DestinationKind, Destinations, HttpPublisher,
    Message, Publisher,
};
pub use enqueue::{enqueue, Event, Payload};
pub use error::OutboxError;
pub use gauges::{OutboxGauges, GAUGE_ROWS};
/// The client the helper and the relay speak to PostgreSQL with.
pub use idempotency_postgres::tokio_postgres;
pub use metrics::{
    ATTEMPTS_TOTAL, ATTEMPT_LINE_TARGET, BLOCKED_AGGREGATES, CLAIM_SECONDS, DELIVERY_SECONDS,
    LEASES_LOST_TOTAL, LISTENING, OLDEST_PENDING_SECONDS, PENDING,
};
pub use names::{channel_name, EventId, NameError, NameKind, OutboxName, TableName};
pub use outbox::{DeadRow, Outbox, OutboxCounts};
pub use relay::{Drained, Health, Relay};
pub use schema::schema_sql;
pub use table::{PayloadKind, TableLayout, TableProblems};
pub use transport::Transport;

/// The README's examples compile, as a reader copies them.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The claim the relay runs on `table` (`$1` owner, `$2` lease in ms, `$3` how many, `$4` the
/// topics left out, `$5` the only topics taken or null), as text: for an operator or a test to look at its plan with `EXPLAIN (ANALYZE, BUFFERS)` and
/// see that rows waiting behind their aggregate cost the claim nothing.
pub fn claim_statement(table: &TableName, payload: PayloadKind) -> String {
    sql::claim(table, payload, sql::ClaimOrder::OldestFirst)
}

/// The claim the relay runs on `table` while a destination is full (the same parameters, `$4`
/// the topics of the full destinations): newest first, so that it meets the rows of the
/// destinations with room before the full one's backlog.
pub fn claim_statement_leaving_out(table: &TableName, payload: PayloadKind) -> String {
    sql::claim(table, payload, sql::ClaimOrder::NewestFirst)
}

/// The statement [`Outbox::gauges`] runs on `table` (`$1` the entries each part walks,
/// [`GAUGE_ROWS`]), as text: for an operator or a test to look at its plan and see that it
/// walks a bounded part of the indexes, whatever the table holds.
pub fn gauges_statement(table: &TableName, on_dead: OnDead) -> String {
    gauges::sql(table, on_dead)
}
