//! Test support for the idempotency crates: the store suite every backend and decorator runs
//! ([`store_suite!`], [`inbox_suite!`]), records to store, temporary files, an HTTP client for
//! tests over real sockets, private Redis servers and clusters (feature `redis`), private
//! PostgreSQL servers, private `nats-server`s with JetStream, private vhosts on the shared
//! RabbitMQ and a client of them (feature `amqp`), a TCP relay a test cuts, and the kernel's
//! view of a TCP connection.
//!
//! Not published: it exists so that each store crate's tests and the proxy's run the same
//! cases and start Redis the same way.

#[cfg(feature = "amqp")]
pub mod amqp;
pub mod answer;
pub mod client;
mod macros;
pub mod nats_server;
#[cfg(feature = "outbox")]
pub mod outbox;
pub mod poll;
pub mod postgres_server;
pub mod rabbitmq;
pub mod receiver;
pub mod records;
#[cfg(feature = "redis")]
pub mod redis;
pub mod redis_cluster;
pub mod redis_server;
pub mod signal;
pub mod suite;
pub mod tcp_relay;
pub mod tcp_state;
pub mod temp;
