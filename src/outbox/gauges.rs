//! An outbox's gauges (`idempotency_outbox_pending`, `..._oldest_pending_seconds`,
//! `..._blocked_aggregates`), counted in its table when `/metrics` is scraped
//! (`crate::scraped`), so a scrape says what the table holds at that moment.

use async_trait::async_trait;

use crate::scraped::GaugeSource;
use crate::store::StoreError;
use idempotency_outbox::{Outbox, BLOCKED_AGGREGATES, OLDEST_PENDING_SECONDS, PENDING};

/// One outbox's count, and the gauges it sets.
#[derive(Debug)]
pub(crate) struct OutboxGauges {
    outbox: Outbox,
    pending: metrics::Gauge,
    oldest: metrics::Gauge,
    blocked: metrics::Gauge,
}

impl OutboxGauges {
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
impl GaugeSource for OutboxGauges {
    async fn read(&self) -> Result<(), StoreError> {
        let counts = self
            .outbox
            .counts()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        self.pending.set(counts.pending as f64);
        self.oldest.set(counts.oldest_pending.as_secs_f64());
        self.blocked.set(counts.blocked_aggregates as f64);
        Ok(())
    }
}
