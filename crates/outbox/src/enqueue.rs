//! The application's side: an event inserted by the application's own transaction, so that the
//! business change and the event commit together or not at all.

use std::collections::BTreeMap;

use idempotency_postgres::tokio_postgres::types::ToSql;
use idempotency_postgres::tokio_postgres::Transaction;
use serde::Serialize;

use crate::names::{EventId, TableName};
use crate::sql::AdminSql;

/// An event's body, as its column holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// JSON text, for a `jsonb` column (the printed DDL's); sent as `application/json`.
    Json(String),
    /// Text, for a `text` column; sent as `text/plain; charset=utf-8`.
    Text(String),
    /// Bytes, for a `bytea` column; sent as `application/octet-stream`.
    Bytes(Vec<u8>),
}

/// One event, as the application inserts it.
#[derive(Debug, Clone)]
pub struct Event {
    id: EventId,
    topic: String,
    aggregate_id: Option<String>,
    payload: Payload,
    headers: BTreeMap<String, String>,
}

impl Event {
    /// An event with a JSON body: `payload` serialized.
    pub fn json(
        id: EventId,
        topic: impl Into<String>,
        payload: &impl Serialize,
    ) -> Result<Self, serde_json::Error> {
        let json = serde_json::to_string(payload)?;
        Ok(Self::new(id, topic, Payload::Json(json)))
    }

    /// An event with any body.
    pub fn new(id: EventId, topic: impl Into<String>, payload: Payload) -> Self {
        Self {
            id,
            topic: topic.into(),
            aggregate_id: None,
            payload,
            headers: BTreeMap::new(),
        }
    }

    /// Orders the event after the earlier events of `aggregate_id` (an order, an account):
    /// the receiver gets them one at a time, in the order they were inserted.
    pub fn aggregate(mut self, aggregate_id: impl Into<String>) -> Self {
        self.aggregate_id = Some(aggregate_id.into());
        self
    }

    /// Adds a request header (`Content-Type` among them, to send the body as another type).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The event's id.
    pub fn id(&self) -> &EventId {
        &self.id
    }
}

/// Inserts `event` into `table` within `transaction`: it is delivered once the transaction
/// commits, and never if it rolls back. A second event with the same id fails the insert
/// (the id is the table's primary key), as a duplicate should.
pub async fn enqueue(
    transaction: &Transaction<'_>,
    table: &TableName,
    event: &Event,
) -> Result<(), idempotency_postgres::tokio_postgres::Error> {
    let sql = AdminSql::new(table);
    let headers = (!event.headers.is_empty())
        .then(|| serde_json::to_string(&event.headers).expect("a map of strings serializes"));
    let (id, topic, aggregate) = (event.id.as_str(), event.topic.as_str(), &event.aggregate_id);
    let (statement, payload): (&str, &(dyn ToSql + Sync)) = match &event.payload {
        Payload::Json(text) => (&sql.insert[0], text),
        Payload::Text(text) => (&sql.insert[1], text),
        Payload::Bytes(bytes) => (&sql.insert[2], bytes),
    };
    transaction
        .execute(statement, &[&id, &topic, aggregate, payload, &headers])
        .await?;
    Ok(())
}
