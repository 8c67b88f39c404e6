//! An inbox route's queues as the status page reads them.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

use crate::status::InboxStats;
use crate::store::{Store, StoreError};
use idempotency_core::model::{InboxQueues, RouteName};

/// Reads one route's queues from the store.
#[derive(Debug)]
pub(crate) struct QueueStats {
    pub(crate) route: RouteName,
    pub(crate) store: Arc<dyn Store>,
}

#[async_trait]
impl InboxStats for QueueStats {
    async fn queues(&self) -> Result<InboxQueues, StoreError> {
        let inbox = self.store.inbox().ok_or_else(|| {
            StoreError::Unavailable("inbox routes need a store that supports them".into())
        })?;
        inbox.queues(&self.route, SystemTime::now()).await
    }
}
