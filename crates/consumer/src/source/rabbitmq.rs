//! A RabbitMQ queue as a [`Source`]: manual acknowledgements, `basic_qos` prefetch set to the
//! consumer's concurrency, dead letters published with `mandatory` on a channel in confirm
//! mode (a returned message is a failure, though the broker confirms it positively).
//!
//! RabbitMQ has no "deliver again after a delay", and its own delivery counts differ across
//! versions, so the consumer keeps both itself: a message to retry is held for the delay,
//! then published again to the queue with `Delivery-Attempt` one higher (confirmed) and only
//! then acknowledged. The count travels with the message and survives restarts; a consumer
//! killed between the two leaves two copies, which the key makes one request.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::StreamExt;
use lapin::acker::Acker;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::{dead_letter_headers, Delivery, Message, Settle, Source, SourceError};

/// The header that carries the attempt count across republishes.
const ATTEMPT: &str = "Delivery-Attempt";

/// A queue on a RabbitMQ virtual host.
pub struct RabbitSource {
    url: String,
    queue: String,
    vhost: String,
    concurrency: u16,
    session: Mutex<Option<Session>>,
    /// The live session's connection and publishing channel, apart from the consumer that
    /// `next` holds while it waits: a dead letter must not wait for the next message.
    links: std::sync::Mutex<Option<(Arc<Connection>, Channel)>>,
    /// Cancelled at a drain: held messages are handed back at once.
    closing: CancellationToken,
}

struct Session {
    consumer: lapin::Consumer,
    /// In confirm mode: dead letters and republished retries.
    publish: Channel,
}

impl std::fmt::Debug for RabbitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSource")
            .field("queue", &self.queue)
            .field("vhost", &self.vhost)
            .finish_non_exhaustive()
    }
}

impl RabbitSource {
    /// A source on `queue` (which must exist) at `url`; connects at the first fetch, and
    /// again after the connection is lost.
    pub fn new(url: &str, queue: &str, concurrency: usize) -> Self {
        Self {
            url: url.to_owned(),
            queue: queue.to_owned(),
            vhost: vhost_of(url),
            concurrency: u16::try_from(concurrency.max(1)).unwrap_or(u16::MAX),
            session: Mutex::new(None),
            links: std::sync::Mutex::new(None),
            closing: CancellationToken::new(),
        }
    }

    async fn connect(&self) -> Result<Session, SourceError> {
        let properties = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio::current());
        let connection = Connection::connect(&self.url, properties)
            .await
            .map_err(|e| SourceError::unavailable("connecting to RabbitMQ", e))?;
        let channel = connection.create_channel().await.map_err(unavailable)?;
        channel
            .basic_qos(self.concurrency, BasicQosOptions::default())
            .await
            .map_err(unavailable)?;
        let consumer = channel
            .basic_consume(
                &self.queue,
                "",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| refused("consuming the queue", &e))?;
        let publish = connection.create_channel().await.map_err(unavailable)?;
        publish
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(unavailable)?;
        *self.links() = Some((Arc::new(connection), publish.clone()));
        Ok(Session { consumer, publish })
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Option<(Arc<Connection>, Channel)>> {
        self.links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn publish_channel(&self) -> Result<Channel, SourceError> {
        let links = self.links();
        let (_, channel) = links.as_ref().ok_or_else(not_connected)?;
        Ok(channel.clone())
    }
}

fn not_connected() -> SourceError {
    SourceError::unavailable("talking to RabbitMQ", "not connected")
}

fn unavailable(e: lapin::Error) -> SourceError {
    SourceError::unavailable("talking to RabbitMQ", e)
}

fn refused(what: &'static str, error: &dyn std::fmt::Display) -> SourceError {
    SourceError::Refused {
        what,
        reason: error.to_string(),
    }
}

/// The virtual host a URL names (its path, decoded), `/` without one.
fn vhost_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.split_once('/').map_or("", |(_, path)| path);
    let path = path.split('?').next().unwrap_or_default();
    if path.is_empty() {
        return "/".to_owned();
    }
    path.replace("%2f", "/").replace("%2F", "/")
}

#[async_trait]
impl Source for RabbitSource {
    async fn next(&self) -> Result<Option<Delivery>, SourceError> {
        let mut session = self.session.lock().await;
        if session.is_none() {
            *session = Some(self.connect().await?);
        }
        let current = session.as_mut().expect("connected above");
        let next = current.consumer.next().await;
        let publish = current.publish.clone();
        match next {
            Some(Ok(delivery)) => Ok(Some(self.delivery(delivery, publish))),
            Some(Err(e)) => {
                *session = None;
                *self.links() = None;
                Err(SourceError::unavailable("consuming the queue", e))
            }
            None => {
                *session = None;
                *self.links() = None;
                Err(SourceError::Refused {
                    what: "consuming the queue",
                    reason: "the broker cancelled the consumer".to_owned(),
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
        let channel = self.publish_channel()?;
        let headers = dead_letter_headers(message, reason);
        publish(&channel, dead_letter, &message.subject, message, headers).await
    }

    async fn lag(&self) -> Result<u64, SourceError> {
        let connection = match self.links().as_ref() {
            Some((connection, _)) => connection.clone(),
            None => return Err(not_connected()),
        };
        let channel = connection.create_channel().await.map_err(unavailable)?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let queue = channel
            .queue_declare(&self.queue, passive, FieldTable::default())
            .await
            .map_err(unavailable)?;
        let _ = channel.close(200, "counted").await;
        Ok(u64::from(queue.message_count()))
    }

    fn event_source(&self, _subject: &str) -> String {
        format!("amqp://{}/{}", self.vhost, self.queue)
    }

    fn close(&self) {
        self.closing.cancel();
    }
}

impl RabbitSource {
    fn delivery(&self, delivery: lapin::message::Delivery, publish: Channel) -> Delivery {
        let properties = &delivery.properties;
        let headers = properties
            .headers()
            .as_ref()
            .map(string_headers)
            .unwrap_or_default();
        let mut message = Message {
            id: properties.message_id().as_ref().map(ToString::to_string),
            subject: delivery.routing_key.to_string(),
            headers,
            body: delivery.data.into(),
            content_type: properties.content_type().as_ref().map(ToString::to_string),
            time: properties
                .timestamp()
                .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
            attempt: 1,
        };
        message.attempt = message
            .header(ATTEMPT)
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(1);
        let settle = RabbitSettle {
            acker: delivery.acker,
            publish,
            queue: self.queue.clone(),
            message: message.clone(),
            closing: self.closing.clone(),
        };
        Delivery {
            message,
            settle: Box::new(settle),
        }
    }
}

/// The headers whose values are text or integers, as strings.
fn string_headers(table: &FieldTable) -> Vec<(String, String)> {
    table
        .inner()
        .iter()
        .filter_map(|(name, value)| {
            let text = match value {
                AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok()?,
                AMQPValue::ShortString(s) => s.to_string(),
                AMQPValue::LongLongInt(n) => n.to_string(),
                AMQPValue::LongInt(n) => n.to_string(),
                AMQPValue::LongUInt(n) => n.to_string(),
                AMQPValue::ShortInt(n) => n.to_string(),
                AMQPValue::ShortUInt(n) => n.to_string(),
                _ => return None,
            };
            Some((name.to_string(), text))
        })
        .collect()
}

/// Publishes a copy of `message` with `headers` to `exchange` under `routing_key`, mandatory
/// and persistent, and waits for the broker's confirm: a returned message or a negative
/// confirm is a failure.
async fn publish(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    message: &Message,
    headers: Vec<(String, String)>,
) -> Result<(), SourceError> {
    let mut table = FieldTable::default();
    for (name, value) in headers {
        table.insert(ShortString::from(name), AMQPValue::LongString(value.into()));
    }
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(table)
        .with_content_type(
            message
                .content_type
                .as_deref()
                .unwrap_or("application/json")
                .into(),
        );
    if let Some(id) = &message.id {
        properties = properties.with_message_id(id.as_str().into());
    }
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let confirm = channel
        .basic_publish(exchange, routing_key, options, &message.body, properties)
        .await
        .map_err(|e| SourceError::unavailable("publishing", e))?;
    match confirm.await {
        Ok(Confirmation::Ack(None)) => Ok(()),
        Ok(Confirmation::Ack(Some(_))) => Err(SourceError::Refused {
            what: "publishing",
            reason: format!("no queue is bound to {exchange:?} for {routing_key:?}"),
        }),
        Ok(other) => Err(SourceError::Refused {
            what: "publishing",
            reason: format!("the broker did not confirm it ({other:?})"),
        }),
        Err(e) => Err(SourceError::unavailable("publishing", e)),
    }
}

struct RabbitSettle {
    acker: Acker,
    publish: Channel,
    queue: String,
    message: Message,
    closing: CancellationToken,
}

#[async_trait]
impl Settle for RabbitSettle {
    async fn ack(&self) -> Result<(), SourceError> {
        self.acker
            .ack(BasicAckOptions::default())
            .await
            .map(drop)
            .map_err(|e| SourceError::unavailable("acknowledging", e))
    }

    async fn retry_later(&self, delay: Duration, counted: bool) -> Result<(), SourceError> {
        let handed_back = tokio::select! {
            () = tokio::time::sleep(delay) => false,
            () = self.closing.cancelled() => true,
        };
        if handed_back || !counted {
            return self.requeue().await;
        }
        let mut headers: Vec<_> = self
            .message
            .headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case(ATTEMPT))
            .cloned()
            .collect();
        headers.push((ATTEMPT.to_owned(), (self.message.attempt + 1).to_string()));
        // Into the queue itself, through the default exchange; acknowledged only once confirmed.
        publish(&self.publish, "", &self.queue, &self.message, headers).await?;
        self.ack().await
    }

    async fn in_progress(&self) -> Result<(), SourceError> {
        // RabbitMQ waits for an acknowledgement as long as the channel lives.
        Ok(())
    }

    async fn term(&self) -> Result<(), SourceError> {
        self.ack().await
    }
}

impl RabbitSettle {
    async fn requeue(&self) -> Result<(), SourceError> {
        let options = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        self.acker
            .nack(options)
            .await
            .map(drop)
            .map_err(|e| SourceError::unavailable("handing the message back", e))
    }
}

#[cfg(test)]
mod tests {
    use super::vhost_of;

    #[test]
    fn the_vhost_is_the_urls_path() {
        assert_eq!(
            vhost_of("amqp://guest:guest@127.0.0.1:5672/orders"),
            "orders"
        );
        assert_eq!(vhost_of("amqp://127.0.0.1:5672/%2f"), "/");
        assert_eq!(vhost_of("amqp://127.0.0.1:5672"), "/");
    }
}
