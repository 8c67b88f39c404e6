//! The test servers' own tests, one binary: the private PostgreSQL answers and keeps what it
//! committed, a private `nats-server` restarts on its port, a RabbitMQ vhost lives as long as
//! its value.

mod brokers;
mod postgres_server;
