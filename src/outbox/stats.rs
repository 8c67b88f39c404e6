//! An outbox's table, counted when asked: by the status page, and by a scrape of `/metrics`,
//! which sets the outbox's gauges (`idempotency_outbox_pending`, `..._oldest_pending_seconds`,
//! `..._blocked_aggregates`) from the count (`crate::operator::scraped`), so both say what
//! `GET /outbox/{name}` says at that moment.

use async_trait::async_trait;

use crate::operator::scraped::GaugeSource;
use crate::operator::status::OutboxStats;
use crate::store::StoreError;
use idempotency_outbox::{
    Outbox, OutboxCounts, BLOCKED_AGGREGATES, OLDEST_PENDING_SECONDS, PENDING,
};

/// One outbox's count, and the gauges it sets.
#[derive(Debug)]
pub(crate) struct TableStats {
    outbox: Outbox,
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
            outbox,
        }
    }
}

#[async_trait]
impl OutboxStats for TableStats {
    async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        let counts = self.outbox.counts().await;
        counts.map_err(|e| StoreError::Unavailable(e.to_string()))
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
