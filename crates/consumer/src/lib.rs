//! Broker consumers for the idempotency layer: each message of a JetStream durable consumer
//! (or a RabbitMQ queue) becomes a request to an HTTP service that goes through the
//! [`IdempotencyLayer`](idempotency_core::IdempotencyLayer), keyed by the message's id, and the
//! message is acknowledged only after the layer has recorded the service's answer. A
//! redelivered message is answered from the store: the service sees each message once.
//!
//! - [`Consumer::build`] puts a [`Source`] and an upstream client together; [`Consumer::run`]
//!   runs it until told to stop, then drains.
//! - [`source`]: the seam a broker implements, and [`source::jetstream`].
//! - [`ConsumerSettings`], [`KeyFrom`]: what `[[consumers]]` says.
//! - [`Stats`]: the counts and dead messages an operator asks for; the metric names.

mod broker_url;
mod build;
mod engine;
mod request;
mod settings;
pub mod source;
mod stats;
mod verdict;

pub use broker_url::{BadBrokerUrl, BrokerKind, BrokerUrl};
pub use build::BuildError;
pub use engine::{Consumer, Upstream};
pub use settings::{BadKeyFrom, ConsumerSettings, KeyFrom, NoKey};
pub use source::{Delivery, Message, Settle, Source, SourceError};
/// The README's example, compiled as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use stats::{Counts, DeadMessage, Stats, DELIVERY_SECONDS, IN_FLIGHT, LAG, MESSAGES_TOTAL};
