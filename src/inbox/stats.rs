//! An inbox route's queues, counted in the store when asked: by the status page, and by a
//! scrape of `/metrics`, which sets the route's queue gauges from the count
//! (`crate::operator::scraped`), so both say what `GET /inbox/{route}` says.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

use super::metrics::QueueGauges;
use crate::operator::scraped::GaugeSource;
use crate::operator::status::InboxStats;
use crate::store::{Store, StoreError};
use idempotency_core::backend::{InboxQueues, RouteName};

/// Reads one route's queues from the store.
#[derive(Debug)]
pub(crate) struct QueueStats {
    route: RouteName,
    store: Arc<dyn Store>,
    gauges: QueueGauges,
}

impl QueueStats {
    /// The queues of `route` in `store` (as the route sees it: sealed when records are).
    pub(crate) fn new(route: RouteName, store: Arc<dyn Store>) -> Self {
        Self {
            gauges: QueueGauges::new(&route),
            route,
            store,
        }
    }
}

#[async_trait]
impl InboxStats for QueueStats {
    async fn queues(&self) -> Result<InboxQueues, StoreError> {
        let inbox = self.store.inbox().ok_or_else(|| {
            StoreError::unavailable("inbox routes need a store that supports them")
        })?;
        inbox.queues(&self.route, SystemTime::now()).await
    }
}

#[async_trait]
impl GaugeSource for QueueStats {
    async fn read(&self) -> Result<(), StoreError> {
        let queues = self.queues().await?;
        self.gauges.set(&queues);
        Ok(())
    }
}
