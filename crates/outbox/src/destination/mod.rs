//! Where an attempt goes: one seam, [`Publisher`], that takes the outgoing [`Message`] and
//! answers a [`Delivery`], whatever carries it. HTTP is one publisher (over any
//! [`Transport`]); JetStream (feature `nats`) and RabbitMQ (feature `amqp`) are the others.
//!
//! The relay never learns which one it spoke to: it judges every [`Delivery`] by the same rules
//! (backoff, `max_attempts`, `max_age`), marks a row delivered only on
//! [`Delivery::Delivered`], and keeps one unconfirmed publish per aggregate whatever the
//! destination. [`Destinations`] maps each destination URL of the config to its publisher.

#[cfg(feature = "amqp")]
pub mod amqp;
mod http;
mod kind;
mod message;
#[cfg(feature = "nats")]
pub mod nats;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ::http::{StatusCode, Uri};
use async_trait::async_trait;

pub use self::http::HttpPublisher;
pub use kind::{redacted, DestinationKind};
pub(crate) use message::build as build_message;
pub use message::Message;

use crate::config::OutboxConfig;
use crate::transport::Transport;

/// What one publish came to, as the destination said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The destination took the message for good: a `2xx`, a stream's acknowledgement (a
    /// duplicate's too), a broker's confirm with nothing returned.
    Delivered {
        /// The HTTP status, for HTTP destinations.
        status: Option<StatusCode>,
    },
    /// Not taken this time: tried again after the backoff, or after `retry_after` when that is
    /// later.
    Failed {
        /// The HTTP status, for HTTP destinations.
        status: Option<StatusCode>,
        /// How long the destination asked to be left alone (`Retry-After`).
        retry_after: Option<Duration>,
        /// Why, for `last_error` and the logs.
        reason: String,
    },
    /// Never taken: the row is dead at once (`410 Gone`, a payload larger than the broker
    /// allows).
    Dead {
        /// The HTTP status, for HTTP destinations.
        status: Option<StatusCode>,
        /// Why, for `last_error` and the logs.
        reason: String,
    },
}

impl Delivery {
    /// A failed attempt with no status and no wait asked for.
    pub fn failed(reason: impl Into<String>) -> Self {
        Delivery::Failed {
            status: None,
            retry_after: None,
            reason: reason.into(),
        }
    }

    /// A dead row with no status.
    pub fn dead(reason: impl Into<String>) -> Self {
        Delivery::Dead {
            status: None,
            reason: reason.into(),
        }
    }
}

/// Publishes one message to one destination.
///
/// The relay calls it outside any transaction, bounds the whole call by `deliver_timeout`
/// (past it the attempt failed), and calls it again for the same row only after this call has
/// ended. An implementation answers [`Delivery::Delivered`] only once the destination has the
/// message for good; anything it cannot be sure of is [`Delivery::Failed`]: the row is sent
/// again with the same id, which the destination's own dedup (`Idempotency-Key`,
/// `Nats-Msg-Id`, `message_id`) turns into a no-op.
#[async_trait]
pub trait Publisher: Send + Sync + std::fmt::Debug + 'static {
    /// Publishes `message`.
    async fn publish(&self, message: &Message) -> Delivery;
}

/// A destination this build cannot reach (its scheme is unknown, or its cargo feature is off):
/// every row for it is dead at once, with the reason. [`OutboxConfig::validate`] refuses such a
/// config before a relay starts.
#[derive(Debug)]
struct Unreachable(String);

#[async_trait]
impl Publisher for Unreachable {
    async fn publish(&self, _: &Message) -> Delivery {
        Delivery::dead(self.0.clone())
    }
}

/// The publisher of every destination URL of one outbox's config.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    by_url: HashMap<String, Arc<dyn Publisher>>,
}

impl Destinations {
    /// No destination yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A publisher for each URL of `config`: HTTP ones through `transport`, brokers through
    /// clients of their own, which connect at the first publish (so a broker that is down at
    /// start delays its rows, not the relay).
    pub fn for_config(config: &OutboxConfig, transport: &Arc<dyn Transport>) -> Self {
        let mut destinations = Self::new();
        for url in config.deliver_to.iter().chain(config.topics.values()) {
            if destinations.by_url.contains_key(&url.to_string()) {
                continue;
            }
            let publisher = publisher_for(config, url, transport)
                .unwrap_or_else(|why| Arc::new(Unreachable(why)));
            destinations.insert(url, publisher);
        }
        destinations
    }

    /// Sends what goes to `url` through `publisher` (replacing the one it had).
    pub fn insert(&mut self, url: &Uri, publisher: Arc<dyn Publisher>) {
        self.by_url.insert(url.to_string(), publisher);
    }

    /// The publisher of `topic`'s destination under `config`.
    pub(crate) fn for_topic(
        &self,
        config: &OutboxConfig,
        topic: &str,
    ) -> Option<&Arc<dyn Publisher>> {
        let url = config.destination(topic)?;
        self.by_url.get(&url.to_string())
    }
}

/// One warning line for each JetStream stream the outbox publishes to whose duplicate window is
/// shorter than `lease` plus `retry_max` (past the window, a row sent again is a second
/// message), and for each NATS server that cannot be asked; empty when every window is long
/// enough or no destination is JetStream. Each server gets `timeout` to answer.
pub async fn duplicate_window_warnings(config: &OutboxConfig, timeout: Duration) -> Vec<String> {
    #[cfg(feature = "nats")]
    {
        nats::duplicate_window_warnings(config, timeout).await
    }
    #[cfg(not(feature = "nats"))]
    {
        let _ = (config, timeout);
        Vec::new()
    }
}

/// The publisher for one destination URL, or why this build has none.
fn publisher_for(
    config: &OutboxConfig,
    url: &Uri,
    transport: &Arc<dyn Transport>,
) -> Result<Arc<dyn Publisher>, String> {
    let unsupported = |reason: &str| format!("destination {}: {reason}", redacted(url));
    match DestinationKind::of(url) {
        Some(DestinationKind::Http) => Ok(Arc::new(HttpPublisher::new(
            transport.clone(),
            url.clone(),
            config.method.clone(),
            config.signer.clone(),
        ))),
        #[cfg(feature = "nats")]
        Some(DestinationKind::JetStream) => Ok(Arc::new(nats::JetStreamPublisher::new(
            url,
            &config.nats_subject_prefix,
            config.deliver_timeout,
        ))),
        #[cfg(feature = "amqp")]
        Some(DestinationKind::Amqp) => {
            let exchange = &config.amqp_exchange;
            Ok(Arc::new(amqp::AmqpPublisher::new(url, exchange)))
        }
        #[allow(unreachable_patterns)]
        Some(kind) => Err(unsupported(&format!(
            "{} destinations are not built in (cargo feature {:?})",
            kind.as_str(),
            kind.feature()
        ))),
        None => Err(unsupported(
            "not http(s)://, nats://, tls://, amqp:// or amqps://",
        )),
    }
}
