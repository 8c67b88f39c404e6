//! A JetStream durable pull consumer as a [`Source`]: created on the stream if missing, with
//! `max_ack_pending` set to the consumer's concurrency; acknowledgements the server confirms
//! (double ack); negative acknowledgements with a delay, so a failing message never spins.
//!
//! The attempt count is the server's own (`delivered` in the message's metadata), so it
//! survives a restart of the consumer.

use std::time::{Duration, SystemTime};

use async_nats::jetstream::consumer::pull::{Config, Stream as Messages};
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::jetstream::message::{AckKind, Message as JsMessage};
use async_nats::jetstream::{self, Context};
use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::sync::Mutex;

use super::{dead_letter_headers, Delivery, Message, Settle, Source, SourceError};

/// Where and how to consume: the stream, the durable consumer, what it takes.
#[derive(Debug, Clone)]
pub struct JetStreamSettings {
    /// An existing stream.
    pub stream: String,
    /// The durable pull consumer's name; created if missing.
    pub durable: String,
    /// Only subjects matching this (optional).
    pub filter_subject: Option<String>,
    /// At most this many messages unacknowledged (`max_ack_pending`).
    pub concurrency: usize,
    /// How long the server waits for an acknowledgement before redelivering (`ack_wait`).
    pub ack_wait: Duration,
}

/// A durable pull consumer on one stream; it connects and binds at the first fetch, and again
/// after a broken pull.
pub struct JetStreamSource {
    url: String,
    settings: JetStreamSettings,
    bound: Mutex<Option<Bound>>,
    /// The live connection's context, apart from the pull `next` holds while it waits: a
    /// dead letter must not wait for the next message.
    context: std::sync::Mutex<Option<Context>>,
}

struct Bound {
    consumer: PullConsumer,
    messages: Option<Messages>,
}

impl std::fmt::Debug for JetStreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamSource")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl JetStreamSource {
    /// A source on the server at `url`; nothing is connected until the first fetch.
    pub fn new(url: &str, settings: JetStreamSettings) -> Self {
        Self {
            url: url.to_owned(),
            settings,
            bound: Mutex::new(None),
            context: std::sync::Mutex::new(None),
        }
    }

    /// Connects to `url` and binds the durable consumer now, creating it when missing.
    pub async fn connect(url: &str, settings: JetStreamSettings) -> Result<Self, SourceError> {
        let source = Self::new(url, settings);
        let bound = source.bind().await?;
        *source.bound.lock().await = Some(bound);
        Ok(source)
    }

    fn context(&self) -> Option<Context> {
        self.context
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn bind(&self) -> Result<Bound, SourceError> {
        let client = async_nats::ConnectOptions::new()
            .connect(self.url.as_str())
            .await
            .map_err(|e| SourceError::unavailable("connecting to NATS", e))?;
        let context = jetstream::new(client);
        let settings = &self.settings;
        let stream = context
            .get_stream(&settings.stream)
            .await
            .map_err(|e| refused("finding the stream", &e))?;
        let config = Config {
            durable_name: Some(settings.durable.clone()),
            filter_subject: settings.filter_subject.clone().unwrap_or_default(),
            ack_policy: AckPolicy::Explicit,
            ack_wait: settings.ack_wait,
            max_ack_pending: i64::try_from(settings.concurrency).unwrap_or(i64::MAX),
            ..Config::default()
        };
        let consumer = stream
            .get_or_create_consumer(&settings.durable, config)
            .await
            .map_err(|e| refused("creating the durable consumer", &e))?;
        *self
            .context
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(context);
        Ok(Bound {
            consumer,
            messages: None,
        })
    }

    async fn open(&self, consumer: &PullConsumer) -> Result<Messages, SourceError> {
        consumer
            .stream()
            .max_messages_per_batch(self.settings.concurrency.max(1))
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await
            .map_err(|e| SourceError::unavailable("pulling messages", e))
    }
}

fn not_connected() -> SourceError {
    SourceError::unavailable("talking to NATS", "not connected")
}

fn refused(what: &'static str, error: &dyn std::fmt::Display) -> SourceError {
    SourceError::Refused {
        what,
        reason: error.to_string(),
    }
}

#[async_trait]
impl Source for JetStreamSource {
    async fn next(&self) -> Result<Option<Delivery>, SourceError> {
        let mut bound = self.bound.lock().await;
        if bound.is_none() {
            *bound = Some(self.bind().await?);
        }
        let current = bound.as_mut().expect("bound above");
        if current.messages.is_none() {
            current.messages = Some(self.open(&current.consumer).await?);
        }
        let pulled = current
            .messages
            .as_mut()
            .expect("opened above")
            .next()
            .await;
        match pulled {
            Some(Ok(message)) => Ok(Some(delivery(message))),
            Some(Err(e)) => {
                // A broken pull is opened afresh on the next call.
                current.messages = None;
                Err(SourceError::unavailable("pulling messages", e))
            }
            None => {
                *bound = None;
                Err(SourceError::Refused {
                    what: "pulling messages",
                    reason: "the message stream ended".to_owned(),
                })
            }
        }
    }

    async fn dead_letter(
        &self,
        dead_letter: &str,
        message: &Message,
        reason: &str,
    ) -> Result<(), SourceError> {
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in dead_letter_headers(message, reason) {
            headers.append(name.as_str(), value.as_str());
        }
        if let Some(id) = &message.id {
            // The dead letter of one message is one message, however often it is published.
            headers.insert("Nats-Msg-Id", format!("dead:{id}").as_str());
        }
        let context = self.context().ok_or_else(not_connected)?;
        let ack = context
            .publish_with_headers(dead_letter.to_owned(), headers, message.body.clone())
            .await
            .map_err(|e| SourceError::unavailable("publishing the dead letter", e))?;
        ack.await
            .map_err(|e| refused("publishing the dead letter", &e))?;
        Ok(())
    }

    async fn lag(&self) -> Result<u64, SourceError> {
        let context = self.context().ok_or_else(not_connected)?;
        let stream = context
            .get_stream_no_info(&self.settings.stream)
            .await
            .map_err(|e| SourceError::unavailable("reading the consumer's counts", e))?;
        let info = stream
            .consumer_info(&self.settings.durable)
            .await
            .map_err(|e| SourceError::unavailable("reading the consumer's counts", e))?;
        Ok(info.num_pending + info.num_ack_pending as u64)
    }

    fn event_source(&self, subject: &str) -> String {
        format!("nats://{}/{subject}", self.settings.stream)
    }

    fn progress_every(&self) -> Duration {
        // Well inside `ack_wait`, so one late tick never lets the server redeliver.
        (self.settings.ack_wait / 3).max(Duration::from_millis(100))
    }
}

/// A message's fields, and its handle.
fn delivery(message: JsMessage) -> Delivery {
    let (attempt, time) = match message.info() {
        Ok(info) => (
            u32::try_from(info.delivered.max(1)).unwrap_or(u32::MAX),
            Some(SystemTime::from(info.published)),
        ),
        Err(_) => (1, None),
    };
    let mut headers = Vec::new();
    for (name, values) in message.headers.iter().flat_map(async_nats::HeaderMap::iter) {
        let name = name.to_string();
        for value in values {
            headers.push((name.clone(), value.as_str().to_owned()));
        }
    }
    let mut fields = Message {
        id: None,
        subject: message.subject.to_string(),
        headers,
        body: message.payload.clone(),
        content_type: None,
        time,
        attempt,
    };
    // Looked up by name in any case: the server and publishers differ in how they write it.
    fields.id = fields.header("Nats-Msg-Id").map(str::to_owned);
    fields.content_type = fields.header("Content-Type").map(str::to_owned);
    Delivery {
        message: fields,
        settle: Box::new(JetStreamSettle { message }),
    }
}

struct JetStreamSettle {
    message: JsMessage,
}

#[async_trait]
impl Settle for JetStreamSettle {
    async fn ack(&self) -> Result<(), SourceError> {
        self.message
            .double_ack()
            .await
            .map_err(|e| SourceError::unavailable("acknowledging", e))
    }

    async fn retry_later(&self, delay: Duration, _counted: bool) -> Result<(), SourceError> {
        self.message
            .ack_with(AckKind::Nak(Some(delay)))
            .await
            .map_err(|e| SourceError::unavailable("asking for a redelivery", e))
    }

    async fn in_progress(&self) -> Result<(), SourceError> {
        self.message
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| SourceError::unavailable("telling the broker it is in progress", e))
    }

    async fn term(&self) -> Result<(), SourceError> {
        self.message
            .double_ack_with(AckKind::Term)
            .await
            .map_err(|e| SourceError::unavailable("terminating", e))
    }
}
