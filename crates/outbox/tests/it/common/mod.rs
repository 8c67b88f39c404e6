//! What the outbox's tests share: the outbox table on a private PostgreSQL (from the
//! test-support crate), an outbox relaying to a receiver, and an HTTP client for the relay.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idempotency_outbox::{Outbox, OutboxConfig, OutboxName, Transport};
use idempotency_postgres::{ConnectOptions, DatabaseUrl};

pub(crate) use idempotency_test_support::outbox::{event, ordered, OutboxDb as Db, WAIT};
pub(crate) use idempotency_test_support::poll;
pub(crate) use idempotency_test_support::receiver::{Receiver, Reply};

/// The relay's HTTP client in these tests: hyper's, over plain HTTP.
#[derive(Debug, Clone)]
pub(crate) struct HyperTransport(Client<HttpConnector, Full<Bytes>>);

impl HyperTransport {
    pub(crate) fn shared() -> Arc<dyn Transport> {
        Arc::new(Self(Client::builder(TokioExecutor::new()).build_http()))
    }
}

#[async_trait]
impl Transport for HyperTransport {
    async fn send(
        &self,
        request: Request<Bytes>,
    ) -> Result<Response<()>, idempotency_core::BoxError> {
        let response = self.0.request(request.map(Full::new)).await?;
        let (parts, body) = response.into_parts();
        let _ = body.collect().await;
        Ok(Response::from_parts(parts, ()))
    }
}

/// Relays to the receiver's `/events`, with quick retries.
pub(crate) trait Relays {
    /// An outbox relaying to `receiver`'s `/events`, with quick retries.
    fn config(&self, receiver: &Receiver) -> OutboxConfig;
    /// An outbox relaying to `url`, with quick retries.
    fn config_to(&self, url: &str) -> OutboxConfig;
    /// An outbox on this database.
    fn outbox(&self, config: OutboxConfig) -> Outbox;
}

impl Relays for Db {
    fn config(&self, receiver: &Receiver) -> OutboxConfig {
        self.config_to(&receiver.url("/events"))
    }

    fn config_to(&self, url: &str) -> OutboxConfig {
        let mut config = OutboxConfig::new(OutboxName::new("payments").unwrap());
        config.deliver_to = Some(url.parse().unwrap());
        config.poll_interval = Duration::from_millis(100);
        config.retry.initial = Duration::from_millis(20);
        config.retry.max = Duration::from_millis(100);
        config.deliver_timeout = Duration::from_secs(5);
        config
    }

    fn outbox(&self, config: OutboxConfig) -> Outbox {
        let url = DatabaseUrl::resolve(&self.url).unwrap();
        Outbox::new(config, url, ConnectOptions::default()).unwrap()
    }
}

/// What `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` answered as `messages`: the plan's top node,
/// and the buffers it read (shared hits and reads), the figure the claim and gauge tests hold.
pub(crate) fn explained(
    messages: &[idempotency_outbox::tokio_postgres::SimpleQueryMessage],
) -> (serde_json::Value, i64) {
    let text = messages
        .iter()
        .find_map(|m| match m {
            idempotency_outbox::tokio_postgres::SimpleQueryMessage::Row(row) => {
                row.get(0).map(str::to_owned)
            }
            _ => None,
        })
        .expect("EXPLAIN answers one row");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let top = plan[0]["Plan"].clone();
    let blocks = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .map(|k| top[k].as_i64().unwrap_or(0))
        .sum();
    (top, blocks)
}
