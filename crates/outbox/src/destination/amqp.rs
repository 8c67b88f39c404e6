//! RabbitMQ destinations over AMQP 0-9-1 (`amqp://`, `amqps://`): each attempt publishes on
//! a channel in confirm mode to `amqp_exchange` with the topic as the routing key, `mandatory`,
//! persistent, `message_id = <id>`, its content type and headers.
//!
//! The row is delivered only on a confirm with nothing returned. A `mandatory` publish that no
//! queue takes comes back as a *positive* confirm carrying the returned message: that is a
//! failed attempt, never a delivery. A negative confirm, or a channel lost with the confirm
//! pending, fails the attempt too; the next attempt opens a fresh connection.

use async_trait::async_trait;
use http::Uri;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use super::{redacted, Delivery, Message, Publisher};

/// AMQP's `delivery_mode` for a message the broker writes to disk.
const PERSISTENT: u8 = 2;

/// Publishes to one RabbitMQ vhost through one connection and one confirm-mode channel,
/// opened at the first publish and again after either is lost.
pub struct AmqpPublisher {
    /// The URL as given (with its credentials); never shown.
    url: String,
    exchange: String,
    link: Mutex<Option<Link>>,
}

/// A connection and its confirm-mode channel. The connection is kept so that it lives as long
/// as the channel does.
struct Link {
    _connection: Connection,
    channel: Channel,
}

impl std::fmt::Debug for AmqpPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url: Option<Uri> = self.url.parse().ok();
        f.debug_struct("AmqpPublisher")
            .field("url", &url.as_ref().map(redacted))
            .field("exchange", &self.exchange)
            .finish_non_exhaustive()
    }
}

impl AmqpPublisher {
    /// Publishes to `exchange` on the broker and vhost of `url`.
    pub fn new(url: &Uri, exchange: &str) -> Self {
        Self {
            url: url.to_string(),
            exchange: exchange.to_owned(),
            link: Mutex::new(None),
        }
    }

    /// The open channel, or a fresh one on a fresh connection.
    async fn channel(&self) -> Result<Channel, String> {
        let mut link = self.link.lock().await;
        if let Some(open) = link.as_ref() {
            if open.channel.status().connected() {
                return Ok(open.channel.clone());
            }
        }
        *link = None;
        let properties = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio::current());
        let connection = Connection::connect(&self.url, properties)
            .await
            .map_err(|e| format!("the AMQP broker cannot be reached: {e}"))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| format!("the AMQP broker refused a channel: {e}"))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| format!("the AMQP broker refused confirm mode: {e}"))?;
        *link = Some(Link {
            _connection: connection,
            channel: channel.clone(),
        });
        Ok(channel)
    }
}

#[async_trait]
impl Publisher for AmqpPublisher {
    async fn publish(&self, message: &Message) -> Delivery {
        let channel = match self.channel().await {
            Ok(channel) => channel,
            Err(why) => return Delivery::failed(why),
        };
        let options = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        let topic = &message.topic;
        let published = channel
            .basic_publish(
                &self.exchange,
                topic,
                options,
                &message.payload,
                properties(message),
            )
            .await;
        let confirm = match published {
            Ok(confirm) => confirm,
            Err(e) => return Delivery::failed(format!("the publish failed: {e}")),
        };
        match confirm.await {
            Ok(Confirmation::Ack(None)) => Delivery::Delivered { status: None },
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
                Delivery::failed(format!(
                    "the broker returned it: no queue takes routing key {topic:?} on exchange \
                     {:?} ({} {})",
                    self.exchange, returned.reply_code, returned.reply_text
                ))
            }
            Ok(Confirmation::Nack(None)) => {
                Delivery::failed("the broker refused it (a negative confirm)")
            }
            Ok(Confirmation::NotRequested) => {
                Delivery::failed("the channel was not in confirm mode")
            }
            Err(e) => Delivery::failed(format!("the channel was lost before its confirm: {e}")),
        }
    }
}

/// The message's properties: persistent, its id and content type, and its headers (the row's
/// own, then the relay's over them).
fn properties(message: &Message) -> BasicProperties {
    let ours = [
        "Outbox-Topic",
        "Outbox-Aggregate-Id",
        "Outbox-Seq",
        "Delivery-Attempt",
    ];
    let mut headers = FieldTable::default();
    let text = |value: &str| AMQPValue::LongString(LongString::from(value.to_owned()));
    for (name, value) in &message.headers {
        if !ours.iter().any(|o| o.eq_ignore_ascii_case(name)) {
            headers.insert(ShortString::from(name.as_str()), text(value));
        }
    }
    headers.insert("Outbox-Topic".into(), text(&message.topic));
    if let Some(aggregate) = &message.aggregate_id {
        headers.insert("Outbox-Aggregate-Id".into(), text(aggregate));
    }
    headers.insert("Outbox-Seq".into(), AMQPValue::LongLongInt(message.seq));
    let attempt = AMQPValue::LongUInt(message.attempt);
    headers.insert("Delivery-Attempt".into(), attempt);
    BasicProperties::default()
        .with_delivery_mode(PERSISTENT)
        .with_message_id(message.id.as_str().into())
        .with_content_type(message.content_type.as_str().into())
        .with_headers(headers)
}
