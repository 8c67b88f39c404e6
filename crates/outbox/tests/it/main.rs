//! The outbox's integration tests, one binary for all of them: delivery, order per aggregate
//! and the claim's turns, each destination's share of the slots, the gauges' bounded reading,
//! faults and deadlines,
//! signatures, least privilege and the start-up check of the table, each against a private
//! PostgreSQL and a real receiver; JetStream and RabbitMQ destinations against a private
//! nats-server and a vhost of their own on RabbitMQ.

#[cfg(feature = "amqp")]
mod amqp;
mod common;
mod deadlines;
mod delivery;
mod faults;
mod gauges;
#[cfg(feature = "nats")]
mod jetstream;
mod order;
mod privilege;
mod shares;
mod signature;
mod table;
mod turns;
