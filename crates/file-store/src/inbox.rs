//! The file store's [`Inbox`]: writes go through the writer thread like every record write,
//! each answered once the write-ahead log is synced past it (a claim too, so no delivery goes
//! out that a crash of the machine could take back); counts and listings are read transactions
//! on a blocking thread, answered once what they saw is synced.

use std::ops::Bound;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use super::queue::{id_key, split_live, QueueAnswer, QueueOp, INBOX, INBOX_DEAD};
use super::writer::{Answer, Op};
use super::{decode, mismatch, read_failed, tables, FileStore};
use idempotency_core::model::{
    unix_millis, CompletedRecord, Delivery, DeliveryId, InboxQueues, RouteName, ScopedKey,
};
use idempotency_core::store::{Acceptance, Claim, Inbox, Settlement};
use idempotency_core::store::{Fenced, StoreError};

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

/// Counts one queue's live and dead deliveries in a read transaction.
fn count(txn: &redb::ReadTransaction, queue: &str, now: u64) -> Result<InboxQueues, StoreError> {
    let live = txn.open_table(INBOX).map_err(read_failed)?;
    let mut counted = InboxQueues::default();
    let mut oldest: Option<u64> = None;
    for entry in live
        .range((queue, 0)..=(queue, u128::MAX))
        .map_err(read_failed)?
    {
        let (key, value) = entry.map_err(read_failed)?;
        // An id starts with its arrival in milliseconds.
        let arrived = (key.value().1 >> 64) as u64;
        oldest = Some(oldest.map_or(arrived, |o| o.min(arrived)));
        match split_live(value.value()) {
            Some((due, Some(_), _)) if due > now => counted.in_flight += 1,
            _ => counted.pending += 1,
        }
    }
    counted.oldest_pending = Duration::from_millis(oldest.map_or(0, |at| now.saturating_sub(at)));
    let dead = txn.open_table(INBOX_DEAD).map_err(read_failed)?;
    for entry in dead
        .range((queue, 0)..=(queue, u128::MAX))
        .map_err(read_failed)?
    {
        entry.map_err(read_failed)?;
        counted.dead += 1;
    }
    Ok(counted)
}

fn list_dead(
    txn: &redb::ReadTransaction,
    queue: &str,
    limit: usize,
    after: Option<DeliveryId>,
) -> Result<Vec<Delivery>, StoreError> {
    let dead = txn.open_table(INBOX_DEAD).map_err(read_failed)?;
    let start = match after {
        Some(after) => Bound::Excluded((queue, id_key(after))),
        None => Bound::Included((queue, 0)),
    };
    let range = dead.range::<(&str, u128)>((start, Bound::Included((queue, u128::MAX))));
    let mut listed = Vec::new();
    for entry in range.map_err(read_failed)?.take(limit) {
        let raw = entry.map_err(read_failed)?.1.value().to_vec();
        listed.push(Delivery::decode(Bytes::from(raw))?);
    }
    Ok(listed)
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
            key: key.storage_key().to_owned(),
            value: tables::unstamped(&ack.encode()),
            ttl,
            queue: key.route().as_str().to_owned(),
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
        self.read(move |txn| count(&txn, &queue, now)).await
    }

    async fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<Vec<Delivery>, StoreError> {
        let queue = queue.as_str().to_owned();
        self.read(move |txn| list_dead(&txn, &queue, limit, after))
            .await
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
