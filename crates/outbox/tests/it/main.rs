//! The outbox's integration tests, one binary for all of them: delivery, order per aggregate
//! and the claim's turns, faults and deadlines, signatures, least privilege and the start-up
//! check of the table, each against a private PostgreSQL and a real receiver.

mod common;
mod deadlines;
mod delivery;
mod faults;
mod order;
mod privilege;
mod signature;
mod table;
mod turns;
