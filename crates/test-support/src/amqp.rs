//! A test's own AMQP client (feature `amqp`): a channel on a vhost of the shared RabbitMQ, and
//! the durable queues a test declares before a relay publishes or a consumer reads, opened the
//! way the proxy's own client opens them (lapin on tokio).

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};

use crate::rabbitmq::RabbitVhost;

/// A channel on the broker at `url` (`amqp://user:pass@host:port/vhost`). The connection
/// lives as long as a channel of it does.
pub async fn channel(url: &str) -> Channel {
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current());
    let connection = Connection::connect(url, properties)
        .await
        .unwrap_or_else(|why| panic!("connect to {url}: {why}"));
    connection.create_channel().await.expect("open a channel")
}

/// Declares each of `queues` durable, as a consumer's queue or a dead-letter queue is.
pub async fn declare_durable_queues(channel: &Channel, queues: &[&str]) {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    for queue in queues {
        let declared = channel.queue_declare(queue, durable, FieldTable::default());
        declared.await.expect("declare a durable queue");
    }
}

impl RabbitVhost {
    /// A channel on this vhost, with the `guest` credentials.
    pub async fn channel(&self) -> Channel {
        channel(&self.url()).await
    }
}
