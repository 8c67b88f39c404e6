//! A row as a claim returns it: what an attempt sends, and what its mark is fenced by.

use std::time::Duration;

use idempotency_postgres::tokio_postgres::Row;
use tokio::time::Instant;

/// One claimed row.
#[derive(Debug, Clone)]
pub(crate) struct ClaimedRow {
    /// The event's id, as the application wrote it (checked when the request is built).
    pub(crate) id: String,
    pub(crate) topic: String,
    pub(crate) aggregate_id: Option<String>,
    /// The body's bytes; `None` for a null payload.
    pub(crate) payload: Option<Vec<u8>>,
    /// The `headers` column as JSON text.
    pub(crate) headers: Option<String>,
    /// This attempt's number (the row's `attempts` after the claim): `Delivery-Attempt`, and
    /// with the relay's owner the fence of the mark.
    pub(crate) attempt: i32,
    /// Its age (since `created_at`) when it was claimed, by the database's clock.
    pub(crate) age: Duration,
    /// Its age for `max_age` when it was claimed: since an operator last retried it, else
    /// since `created_at`.
    pub(crate) budget_age: Duration,
    /// When the claim came back, by this process's clock.
    pub(crate) claimed: Instant,
}

impl ClaimedRow {
    /// Decodes a row of the claim statement's `RETURNING`.
    pub(crate) fn decode(
        row: &Row,
        claimed: Instant,
    ) -> Result<Self, idempotency_postgres::tokio_postgres::Error> {
        let age: f64 = row.try_get(6)?;
        let budget_age: f64 = row.try_get(7)?;
        Ok(Self {
            id: row.try_get(0)?,
            topic: row.try_get(1)?,
            aggregate_id: row.try_get(2)?,
            payload: row.try_get(3)?,
            headers: row.try_get(4)?,
            attempt: row.try_get(5)?,
            age: Duration::try_from_secs_f64(age.max(0.0)).unwrap_or_default(),
            budget_age: Duration::try_from_secs_f64(budget_age.max(0.0)).unwrap_or_default(),
            claimed,
        })
    }

    /// Its age now: at the claim, plus the time since.
    pub(crate) fn age_now(&self) -> Duration {
        self.age + self.claimed.elapsed()
    }

    /// Its age for `max_age` now: a retried row's budget counts from its retry.
    pub(crate) fn budget_age_now(&self) -> Duration {
        self.budget_age + self.claimed.elapsed()
    }

    /// This attempt's number, as the headers and logs count.
    pub(crate) fn attempt_number(&self) -> u32 {
        u32::try_from(self.attempt).unwrap_or(0)
    }
}
