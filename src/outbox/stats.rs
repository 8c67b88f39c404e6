//! An outbox's table, counted when asked: by the status page, and by a scrape of `/metrics`,
//! which sets the outbox's gauges (`idempotency_outbox_pending`, `..._oldest_pending_seconds`,
//! `..._blocked_aggregates`) from the count (`crate::operator::scraped`), so both say what
//! `GET /outbox/{name}` says at that moment.
//!
//! A count reads the table, so it is kept for `FRESH` and shared: however often `/metrics` is
//! scraped and the status page asked, the relay's small pool counts each table at most once
//! per `FRESH` (scrapes that come while a count runs wait for it rather than start another).

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::operator::scraped::GaugeSource;
use crate::operator::status::OutboxStats;
use crate::store::StoreError;
use idempotency_outbox::{
    Outbox, OutboxCounts, BLOCKED_AGGREGATES, OLDEST_PENDING_SECONDS, PENDING,
};

/// How long a count stands for the table.
const FRESH: Duration = Duration::from_secs(2);

/// One outbox's count, and the gauges it sets.
#[derive(Debug)]
pub(crate) struct TableStats {
    outbox: Outbox,
    last: Mutex<Option<(Instant, OutboxCounts)>>,
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
            last: Mutex::new(None),
            outbox,
        }
    }
}

#[async_trait]
impl OutboxStats for TableStats {
    async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((at, counts)) = *last {
            if at.elapsed() < FRESH {
                return Ok(counts);
            }
        }
        let counts =
            self.outbox.counts().await.map_err(|e| {
                StoreError::unavailable_from("the outbox's table cannot be read", e)
            })?;
        *last = Some((Instant::now(), counts));
        Ok(counts)
    }
}

#[async_trait]
impl GaugeSource for TableStats {
    async fn read(&self) -> Result<(), StoreError> {
        let counts = OutboxStats::counts(self).await?;
        self.pending.set(counts.pending as f64);
        self.oldest.set(counts.oldest_pending.as_secs_f64());
        self.blocked.set(counts.blocked_aggregates as f64);
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
    async fn scrapes_in_quick_succession_count_the_table_once() {
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
        // Were the table counted again, this scrape would fail.
        db.execute("ALTER TABLE outbox RENAME TO elsewhere").await;
        for _ in 0..10 {
            stats.read().await.unwrap();
        }
    }
}
