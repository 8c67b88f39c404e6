//! An outbox's table, read when asked: counted exactly for the status page (as
//! `GET /outbox/{name}` counts it), and read in bounded work for a scrape of `/metrics`, which
//! sets the outbox's gauges (`idempotency_outbox_pending`, `..._oldest_pending_seconds`,
//! `..._blocked_aggregates`) from [`Outbox::gauges`] (`crate::operator::scraped`): a scrape
//! comes whatever the table's size, so what it costs the database must not grow with it.
//!
//! Each reading is kept for `FRESH` and shared: however often `/metrics` is scraped and the
//! status page asked, the relay's small pool reads each table at most once per `FRESH` for
//! each (callers that come while a reading runs wait for it rather than start another).

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::operator::scraped::GaugeSource;
use crate::operator::status::OutboxStats;
use crate::store::StoreError;
use idempotency_outbox::{
    Outbox, OutboxCounts, OutboxError, OutboxGauges, BLOCKED_AGGREGATES, OLDEST_PENDING_SECONDS,
    PENDING,
};

/// How long a reading stands for the table.
const FRESH: Duration = Duration::from_secs(2);

/// A reading kept for [`FRESH`].
#[derive(Debug)]
struct Cached<T>(Mutex<Option<(Instant, T)>>);

impl<T: Copy> Cached<T> {
    fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// The kept reading while it is fresh, else a new one from `read`.
    async fn get<F>(&self, read: impl FnOnce() -> F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, OutboxError>>,
    {
        let mut last = self.0.lock().await;
        if let Some((at, value)) = *last {
            if at.elapsed() < FRESH {
                return Ok(value);
            }
        }
        let value = read()
            .await
            .map_err(|e| StoreError::unavailable_from("the outbox's table cannot be read", e))?;
        *last = Some((Instant::now(), value));
        Ok(value)
    }
}

/// One outbox's readings, and the gauges they set.
#[derive(Debug)]
pub(crate) struct TableStats {
    outbox: Outbox,
    counts: Cached<OutboxCounts>,
    gauges: Cached<OutboxGauges>,
    pending: metrics::Gauge,
    oldest: metrics::Gauge,
    blocked: metrics::Gauge,
}

impl TableStats {
    pub(crate) fn new(outbox: Outbox) -> Self {
        let name = || outbox.name().as_str().to_owned();
        Self {
            pending: metrics::gauge!(PENDING, "outbox" => name()),
            oldest: metrics::gauge!(OLDEST_PENDING_SECONDS, "outbox" => name()),
            blocked: metrics::gauge!(BLOCKED_AGGREGATES, "outbox" => name()),
            counts: Cached::new(),
            gauges: Cached::new(),
            outbox,
        }
    }
}

#[async_trait]
impl OutboxStats for TableStats {
    async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        self.counts.get(|| self.outbox.counts()).await
    }
}

#[async_trait]
impl GaugeSource for TableStats {
    async fn read(&self) -> Result<(), StoreError> {
        let gauges = self.gauges.get(|| self.outbox.gauges()).await?;
        self.pending.set(gauges.pending as f64);
        self.oldest.set(gauges.oldest_pending.as_secs_f64());
        self.blocked.set(gauges.blocked_aggregates as f64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idempotency_outbox::{OutboxConfig, OutboxName};
    use idempotency_postgres::{ConnectOptions, DatabaseUrl};
    use idempotency_test_support::outbox::OutboxDb;
    use idempotency_test_support::postgres_server::shared_postgres;

    #[tokio::test]
    async fn scrapes_and_pages_in_quick_succession_read_the_table_once() {
        let Some(server) = shared_postgres() else {
            return;
        };
        let db = OutboxDb::on(server.fresh_database()).await;
        let mut config = OutboxConfig::new(OutboxName::new("o").unwrap());
        config.deliver_to = Some("http://127.0.0.1:9/".parse().unwrap());
        let url = DatabaseUrl::resolve(&db.url).unwrap();
        let outbox = Outbox::new(config, url, ConnectOptions::default()).unwrap();
        let stats = TableStats::new(outbox);
        stats.read().await.unwrap();
        OutboxStats::counts(&stats).await.unwrap();
        // Were the table read again, these would fail.
        db.execute("ALTER TABLE outbox RENAME TO elsewhere").await;
        for _ in 0..10 {
            stats.read().await.unwrap();
            OutboxStats::counts(&stats).await.unwrap();
        }
    }
}
