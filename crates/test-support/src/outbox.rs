//! Outbox tables on a private PostgreSQL (feature `outbox`): a database of one test's own with
//! the printed DDL applied, the application's side (events inserted in transactions), and a
//! look at a row as the relay left it.

use std::time::Duration;

use idempotency_outbox::{enqueue, schema_sql, Event, EventId, Payload, TableName};
use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Pool};

use crate::poll;
use crate::postgres_server::shared_postgres;

/// How long a test waits for what should happen.
pub const WAIT: Duration = Duration::from_secs(30);

/// The channel the printed DDL's NOTIFY trigger notifies, in these tests.
pub const CHANNEL: &str = "outbox";

/// A database of one test's own, with the outbox table.
pub struct OutboxDb {
    /// Its URL.
    pub url: String,
    /// A pool of the test's own, as the application's.
    pub pool: Pool,
}

impl OutboxDb {
    /// A fresh database on the shared server with the DDL applied, or `None` when there is no
    /// PostgreSQL (the test is skipped, loudly).
    pub async fn fresh() -> Option<Self> {
        let server = shared_postgres()?;
        Some(Self::on(server.fresh_database()).await)
    }

    /// The database at `url`, with the DDL (and its NOTIFY trigger on [`CHANNEL`]) applied.
    pub async fn on(url: String) -> Self {
        let db = Self::empty(url);
        db.execute(&schema_sql(&TableName::default(), Some(CHANNEL)))
            .await;
        db
    }

    /// The database at `url` as it is.
    pub fn empty(url: String) -> Self {
        let url_parsed = DatabaseUrl::resolve(&url).expect("a postgres:// URL");
        let pool = pool(&url_parsed, &ConnectOptions::default()).expect("a pool");
        Self { url, pool }
    }

    /// Runs `sql` (any number of statements).
    pub async fn execute(&self, sql: &str) {
        let client = self.pool.get().await.expect("a connection");
        client.batch_execute(sql).await.expect("the statements run");
    }

    /// A number `sql` counts.
    pub async fn count(&self, sql: &str) -> i64 {
        let client = self.pool.get().await.expect("a connection");
        client
            .query_one(sql, &[])
            .await
            .expect("the query runs")
            .get(0)
    }

    /// Inserts `events` into `outbox` in one transaction, committed.
    pub async fn commit(&self, events: &[Event]) {
        let mut client = self.pool.get().await.expect("a connection");
        let transaction = client.transaction().await.expect("a transaction");
        for event in events {
            enqueue(&transaction, &TableName::default(), event)
                .await
                .expect("the event is inserted");
        }
        transaction.commit().await.expect("the commit");
    }

    /// The row `id` as the relay left it.
    pub async fn row(&self, id: &str) -> Option<RowState> {
        let client = self.pool.get().await.expect("a connection");
        let sql = "SELECT delivered_at IS NOT NULL, dead_at IS NOT NULL, attempts, last_status, \
                   last_error, lease_owner, seq FROM outbox WHERE id = $1";
        let row = client
            .query_opt(sql, &[&id])
            .await
            .expect("the query runs")?;
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
    /// Delivered.
    pub delivered: bool,
    /// Dead.
    pub dead: bool,
    /// Attempts made.
    pub attempts: i32,
    /// The last answer's status.
    pub last_status: Option<i32>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Who holds its lease.
    pub lease_owner: Option<String>,
    /// Its place in insertion order.
    pub seq: i64,
}

/// An event of topic `payment.confirmed` with a small JSON body naming it.
pub fn event(id: &str) -> Event {
    let body = serde_json::json!({ "event": id });
    Event::json(
        EventId::new(id).expect("a valid id"),
        "payment.confirmed",
        &body,
    )
    .expect("JSON serializes")
}

/// The same, in `aggregate`'s order.
pub fn ordered(id: &str, aggregate: &str) -> Event {
    event(id).aggregate(aggregate)
}

/// A text event, for tables whose payload is not JSON.
pub fn text_event(id: &str, body: &str) -> Event {
    let id = EventId::new(id).expect("a valid id");
    Event::new(id, "payment.confirmed", Payload::Text(body.into()))
}
