//! The outbox's integration tests, one binary for all of them: delivery, order per aggregate,
//! faults, signatures and the start-up check of the table, each against a private PostgreSQL
//! and a real receiver.

mod common;
mod delivery;
mod faults;
mod order;
mod signature;
mod table;
