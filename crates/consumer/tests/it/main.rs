//! The consumer's integration tests, one binary for both brokers: a JetStream durable consumer
//! against a private `nats-server -js`, and a RabbitMQ queue in a vhost of its own on the shared
//! broker, each delivering to a real upstream over loopback.

mod common;
mod jetstream;
mod rabbitmq;
