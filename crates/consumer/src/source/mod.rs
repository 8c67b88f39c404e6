//! What the consumer needs of a broker, and nothing more: the next message, and for each
//! message the four answers a broker understands (done, again later, still working, never
//! again). The engine is written against this seam, so JetStream and RabbitMQ differ only here.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

pub mod jetstream;
pub mod rabbitmq;

/// One message as the broker delivered it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The broker's own id of the message (`Nats-Msg-Id`, AMQP `message_id`), when it has one.
    pub id: Option<String>,
    /// The subject (JetStream) or routing key (RabbitMQ).
    pub subject: String,
    /// The message's headers whose values are strings, in the order the broker gave them.
    pub headers: Vec<(String, String)>,
    /// The payload.
    pub body: Bytes,
    /// The message's content type, when it names one.
    pub content_type: Option<String>,
    /// When the broker (or its publisher) says the message was published.
    pub time: Option<SystemTime>,
    /// Which delivery of this message this is, from 1, counted across consumer restarts.
    pub attempt: u32,
}

impl Message {
    /// The first value of a header, by name, case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A message and the handle that settles it with the broker.
pub struct Delivery {
    /// What was delivered.
    pub message: Message,
    /// How to answer the broker about it.
    pub settle: Box<dyn Settle>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

/// The answers a broker takes about one message. Each consumes the delivery's right to answer:
/// the engine calls exactly one of `ack`, `retry_later` or `term`, and `in_progress` any number
/// of times before it.
#[async_trait]
pub trait Settle: Send + Sync {
    /// Done: the broker may forget the message. Returns only once the broker confirmed it where
    /// the broker can (JetStream's double acknowledgement).
    async fn ack(&self) -> Result<(), SourceError>;
    /// Not now: deliver it again after `delay`. `counted` says whether this was an attempt
    /// (the upstream was asked), as opposed to a wait for a first request still running.
    async fn retry_later(&self, delay: Duration, counted: bool) -> Result<(), SourceError>;
    /// Still working: the broker must not redeliver it yet.
    async fn in_progress(&self) -> Result<(), SourceError>;
    /// Never again (a dead message, already published to the dead letter if there is one).
    async fn term(&self) -> Result<(), SourceError>;
}

/// A broker a consumer reads from.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// The next message; waits for one. `Ok(None)` when the source is closed for good.
    async fn next(&self) -> Result<Option<Delivery>, SourceError>;
    /// Publishes a dead message to `dead_letter` (a JetStream subject, a RabbitMQ exchange)
    /// and returns once the broker confirmed it.
    async fn dead_letter(
        &self,
        dead_letter: &str,
        message: &Message,
        reason: &str,
    ) -> Result<(), SourceError>;
    /// Messages not yet acknowledged, as the broker counts them.
    async fn lag(&self) -> Result<u64, SourceError>;
    /// The CloudEvents `ce-source` of a message on `subject`.
    fn event_source(&self, subject: &str) -> String;
    /// How often to tell the broker a slow message is still being worked on.
    fn progress_every(&self) -> Duration {
        Duration::from_secs(10)
    }
    /// A drain has begun: messages the source holds for a later try are handed back at once.
    fn close(&self) {}
}

/// A broker operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The broker could not be reached, or the connection broke.
    #[error("the broker cannot be reached: {what}")]
    Unavailable {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The broker refused the operation (no such stream or queue, an unroutable dead letter).
    #[error("the broker refused {what}: {reason}")]
    Refused {
        /// What was being done.
        what: &'static str,
        /// The broker's words.
        reason: String,
    },
}

impl SourceError {
    /// A failure of the connection while doing `what`.
    pub fn unavailable(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Unavailable {
            what,
            source: source.into(),
        }
    }
}

/// The headers a dead letter carries beside the message's own: why it died and after how many
/// attempts.
pub(crate) fn dead_letter_headers(message: &Message, reason: &str) -> Vec<(String, String)> {
    let mut headers = message.headers.clone();
    headers.push(("Dead-Reason".to_owned(), reason.to_owned()));
    headers.push(("Delivery-Attempt".to_owned(), message.attempt.to_string()));
    headers.push(("Dead-Subject".to_owned(), message.subject.clone()));
    headers
}
