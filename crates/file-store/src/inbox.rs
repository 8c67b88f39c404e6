//! The file store's [`Inbox`]: every operation goes through the writer thread like every record
//! write, each answered once the log is synced past it (a claim too, so no delivery goes out
//! that a crash of the machine could take back; counts and listings too, since they could
//! show a batch not synced yet).

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use super::queue::{QueueAnswer, QueueOp};
use super::writer::{Answer, Op};
use super::{decode, mismatch, values, FileStore};
use idempotency_core::backend::{
    unix_millis, CompletedRecord, Delivery, DeliveryId, InboxQueues, RouteName, ScopedKey,
};
use idempotency_core::backend::{Acceptance, Claim, Inbox, Settlement};
use idempotency_core::{backend::Fenced, StoreError};

fn millis(span: Duration) -> u64 {
    span.as_millis().try_into().unwrap_or(u64::MAX)
}

impl FileStore {
    async fn queue_op(&self, op: QueueOp) -> Result<QueueAnswer, StoreError> {
        match self.writer.submit(Op::Queue(op)).await? {
            Answer::Queue(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    async fn queue_done(&self, op: QueueOp) -> Result<bool, StoreError> {
        match self.queue_op(op).await? {
            QueueAnswer::Done(done) => Ok(done),
            _ => Err(mismatch()),
        }
    }
}

#[async_trait]
impl Inbox for FileStore {
    async fn accept(
        &self,
        key: &ScopedKey,
        ack: &CompletedRecord,
        delivery: &Delivery,
        ttl: Duration,
    ) -> Result<Acceptance, StoreError> {
        let op = Op::Accept {
            key: key.clone(),
            value: values::unstamped(&ack.encode()),
            ttl,
            id: delivery.id,
            due: unix_millis(delivery.received_at),
            delivery: delivery.encode().to_vec(),
        };
        match self.writer.submit(op).await? {
            Answer::Acquired => Ok(Acceptance::Queued),
            Answer::Existing(raw) => Ok(Acceptance::Existing(decode(raw)?)),
            _ => Err(mismatch()),
        }
    }

    async fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let now = unix_millis(now);
        let op = QueueOp::Claim {
            queue: queue.as_str().to_owned(),
            now,
            max,
            until: now.saturating_add(millis(lease)),
        };
        let QueueAnswer::Claimed(claimed) = self.queue_op(op).await? else {
            return Err(mismatch());
        };
        let claim = |(token, raw): (_, Vec<u8>)| {
            let delivery = Delivery::decode(Bytes::from(raw))?;
            Ok(Claim { delivery, token })
        };
        claimed.into_iter().map(claim).collect()
    }

    async fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Result<Fenced, StoreError> {
        let op = QueueOp::Settle {
            queue: queue.as_str().to_owned(),
            id: claim.delivery.id,
            token: claim.token,
            settlement: settlement.clone(),
        };
        match self.queue_op(op).await? {
            QueueAnswer::Fenced(fenced) => Ok(fenced),
            _ => Err(mismatch()),
        }
    }

    async fn queues(&self, queue: &RouteName, now: SystemTime) -> Result<InboxQueues, StoreError> {
        let (queue, now) = (queue.as_str().to_owned(), unix_millis(now));
        match self.queue_op(QueueOp::Count { queue, now }).await? {
            QueueAnswer::Counted(counted) => Ok(counted),
            _ => Err(mismatch()),
        }
    }

    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        let queue = queue.as_str().to_owned();
        let op = QueueOp::ListDead {
            queue,
            limit,
            after,
        };
        let QueueAnswer::Listed(listed) = self.queue_op(op).await? else {
            return Err(mismatch());
        };
        let decode = |raw: Vec<u8>| Delivery::decode(Bytes::from(raw)).map_err(StoreError::from);
        listed.into_iter().map(decode).collect()
    }

    async fn retry_dead(
        &self,
        queue: &RouteName,
        id: DeliveryId,
        now: SystemTime,
    ) -> Result<bool, StoreError> {
        let queue = queue.as_str().to_owned();
        let now = unix_millis(now);
        self.queue_done(QueueOp::RetryDead { queue, id, now }).await
    }

    async fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> Result<bool, StoreError> {
        let queue = queue.as_str().to_owned();
        self.queue_done(QueueOp::RemoveDead { queue, id }).await
    }
}
