//! What the outbox's tests share: a database of their own on a private PostgreSQL with the
//! outbox table in it, the application's side (events inserted in transactions), a look at a
//! row as the relay left it, and an HTTP client for the relay.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idempotency_outbox::{
    enqueue, schema_sql, Event, EventId, Outbox, OutboxConfig, OutboxName, Payload, TableName,
    Transport,
};
use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Pool};
use idempotency_test_support::postgres_server::shared_postgres;

pub use idempotency_test_support::poll;
pub use idempotency_test_support::receiver::{Receiver, Reply};

/// How long a test waits for what should happen.
pub const WAIT: Duration = Duration::from_secs(30);

/// The relay's HTTP client in these tests: hyper's, over plain HTTP.
#[derive(Debug, Clone)]
pub struct HyperTransport(Client<HttpConnector, Full<Bytes>>);

impl HyperTransport {
    pub fn shared() -> Arc<dyn Transport> {
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

/// A database of one test's own, with the outbox table.
pub struct Db {
    pub url: String,
    pub pool: Pool,
}

impl Db {
    /// A fresh database with the printed DDL applied (NOTIFY trigger on channel `outbox`), or
    /// `None` when there is no PostgreSQL (the test is skipped, loudly).
    pub async fn fresh() -> Option<Self> {
        let server = shared_postgres()?;
        Some(Self::on(server.fresh_database()).await)
    }

    /// The outbox table on the database at `url`.
    pub async fn on(url: String) -> Self {
        let pool = pool(
            &DatabaseUrl::resolve(&url).unwrap(),
            &ConnectOptions::default(),
        )
        .unwrap();
        let db = Self { url, pool };
        db.execute(&schema_sql(&TableName::default(), Some("outbox")))
            .await;
        db
    }

    pub async fn execute(&self, sql: &str) {
        let client = self.pool.get().await.unwrap();
        client.batch_execute(sql).await.unwrap();
    }

    /// An outbox relaying to `receiver`'s `/events`, with quick retries.
    pub fn config(&self, receiver: &Receiver) -> OutboxConfig {
        let mut config = OutboxConfig::new(OutboxName::new("payments").unwrap());
        config.deliver_to = Some(receiver.url("/events").parse().unwrap());
        config.poll_interval = Duration::from_millis(100);
        config.retry.initial = Duration::from_millis(20);
        config.retry.max = Duration::from_millis(100);
        config.deliver_timeout = Duration::from_secs(5);
        config
    }

    pub fn outbox(&self, config: OutboxConfig) -> Outbox {
        let url = DatabaseUrl::resolve(&self.url).unwrap();
        Outbox::new(config, url, ConnectOptions::default()).unwrap()
    }

    /// Inserts `events` in one transaction, committed.
    pub async fn commit(&self, events: &[Event]) {
        let mut client = self.pool.get().await.unwrap();
        let transaction = client.transaction().await.unwrap();
        for event in events {
            enqueue(&transaction, &TableName::default(), event)
                .await
                .unwrap();
        }
        transaction.commit().await.unwrap();
    }

    /// The row `id` as the relay left it.
    pub async fn row(&self, id: &str) -> Option<RowState> {
        let client = self.pool.get().await.unwrap();
        let row = client
            .query_opt(
                "SELECT delivered_at IS NOT NULL, dead_at IS NOT NULL, attempts, last_status, \
                 last_error, lease_owner, seq FROM outbox WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap()?;
        Some(RowState {
            delivered: row.get(0),
            dead: row.get(1),
            attempts: row.get(2),
            last_status: row.get(3),
            last_error: row.get(4),
            lease_owner: row.get(5),
            seq: row.get(6),
        })
    }

    /// Waits until the row `id` is delivered.
    pub async fn until_delivered(&self, id: &str) -> RowState {
        poll::until(WAIT, format!("{id} delivered"), async || {
            self.row(id).await.filter(|r| r.delivered)
        })
        .await
    }

    /// Waits until the row `id` is dead.
    pub async fn until_dead(&self, id: &str) -> RowState {
        poll::until(WAIT, format!("{id} dead"), async || {
            self.row(id).await.filter(|r| r.dead)
        })
        .await
    }
}

/// A row's bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowState {
    pub delivered: bool,
    pub dead: bool,
    pub attempts: i32,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub lease_owner: Option<String>,
    pub seq: i64,
}

/// An event of topic `payment.confirmed` with a small JSON body naming it.
pub fn event(id: &str) -> Event {
    let body = serde_json::json!({ "event": id });
    Event::json(EventId::new(id).unwrap(), "payment.confirmed", &body).unwrap()
}

/// The same, in `aggregate`'s order.
pub fn ordered(id: &str, aggregate: &str) -> Event {
    event(id).aggregate(aggregate)
}

/// A text event, for tables whose payload is not JSON.
pub fn text_event(id: &str, body: &str) -> Event {
    Event::new(
        EventId::new(id).unwrap(),
        "payment.confirmed",
        Payload::Text(body.into()),
    )
}
