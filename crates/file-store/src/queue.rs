//! The file store's inbox queues: three tables, and the writes the writer thread applies to
//! them inside its batch transaction.
//!
//! - `inbox`: `(route, id)` to the live delivery: its due time (8 bytes), its latest claim's
//!   token (8) and whether it has one (1), then `Delivery::encode()`. Ids sort by arrival, so
//!   a queue's first entry is its oldest delivery.
//! - `inbox_due`: `(route, due, id)` for every live delivery, an index `claim` reads from the
//!   front, so it never scans deliveries that are not due.
//! - `inbox_dead`: `(route, id)` to a dead delivery's encoding, in id order for paging.
//!
//! `accept` writes the acknowledgement record and the delivery in the one transaction that
//! writes every other record of its batch, logged and synced before anyone hears of it.
//! Changes to `inbox` and `inbox_dead` go to a [`Journal`] for the write-ahead log; `inbox_due`
//! follows from `inbox` and is rebuilt by the same calls on replay.

use redb::{ReadableTable, StorageError, Table, TableDefinition, TableError, WriteTransaction};

use std::time::Duration;

use super::guard::Guard;
use super::journal::Journal;
use idempotency_core::model::{unix_millis, Delivery, DeliveryId, FencingToken};
use idempotency_core::store::Fenced;
use idempotency_core::store::Settlement;

pub(super) const INBOX: TableDefinition<(&str, u128), &[u8]> = TableDefinition::new("inbox");
pub(super) const INBOX_DUE: TableDefinition<(&str, u64, u128), ()> =
    TableDefinition::new("inbox_due");
pub(super) const INBOX_DEAD: TableDefinition<(&str, u128), &[u8]> =
    TableDefinition::new("inbox_dead");

/// Due time, claim token, claimed flag.
const LIVE_HEADER: usize = 17;

/// A delivery id as the tables order it: numeric order is the id's byte order.
pub(super) fn id_key(id: DeliveryId) -> u128 {
    u128::from_be_bytes(*id.as_bytes())
}

/// A live entry taken apart: due time, latest claim, encoded delivery.
pub(super) fn split_live(value: &[u8]) -> Option<(u64, Option<FencingToken>, &[u8])> {
    let header = value.get(..LIVE_HEADER)?;
    let due = u64::from_be_bytes(header[..8].try_into().ok()?);
    let token = u64::from_be_bytes(header[8..16].try_into().ok()?);
    let claim = (header[16] == 1).then(|| FencingToken::from_u64(token));
    Some((due, claim, &value[LIVE_HEADER..]))
}

fn join_live(due: u64, claim: Option<FencingToken>, delivery: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(LIVE_HEADER + delivery.len());
    value.extend_from_slice(&due.to_be_bytes());
    value.extend_from_slice(&claim.map_or(0, FencingToken::as_u64).to_be_bytes());
    value.push(u8::from(claim.is_some()));
    value.extend_from_slice(delivery);
    value
}

/// A write to a queue, as the writer thread applies it.
pub(super) enum QueueOp {
    Claim {
        queue: String,
        now: u64,
        max: usize,
        until: u64,
    },
    Settle {
        queue: String,
        id: DeliveryId,
        token: FencingToken,
        settlement: Settlement,
    },
    RetryDead {
        queue: String,
        id: DeliveryId,
        now: u64,
    },
    RemoveDead {
        queue: String,
        id: DeliveryId,
    },
}

pub(super) enum QueueAnswer {
    /// Claimed deliveries: each one's token and its encoding, attempts counted.
    Claimed(Vec<(FencingToken, Vec<u8>)>),
    Fenced(Fenced),
    Done(bool),
}

/// The three tables, opened inside one write transaction, and the changes made to them.
pub(super) struct QueueTables<'txn> {
    live: Table<'txn, (&'static str, u128), &'static [u8]>,
    due: Table<'txn, (&'static str, u64, u128), ()>,
    dead: Table<'txn, (&'static str, u128), &'static [u8]>,
    journal: Journal,
}

type Result<T> = std::result::Result<T, StorageError>;

impl<'txn> QueueTables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> std::result::Result<Self, TableError> {
        Ok(Self {
            live: txn.open_table(INBOX)?,
            due: txn.open_table(INBOX_DUE)?,
            dead: txn.open_table(INBOX_DEAD)?,
            journal: Journal::default(),
        })
    }

    /// The changes made through these tables so far, leaving none.
    pub(super) fn take_journal(&mut self) -> Journal {
        std::mem::take(&mut self.journal)
    }

    /// Queues an encoded delivery, due at `due`, unclaimed.
    pub(super) fn push(
        &mut self,
        queue: &str,
        id: DeliveryId,
        due: u64,
        delivery: &[u8],
    ) -> Result<()> {
        self.put(queue, id_key(id), due, None, delivery)
    }

    fn put(
        &mut self,
        queue: &str,
        id: u128,
        due: u64,
        claim: Option<FencingToken>,
        delivery: &[u8],
    ) -> Result<()> {
        self.put_value(queue, id, &join_live(due, claim, delivery))
    }

    /// Writes a live entry as it is stored, moving its index entry along with it.
    pub(super) fn put_value(&mut self, queue: &str, id: u128, value: &[u8]) -> Result<()> {
        self.journal.live_put(queue, id, value);
        let old = self.live.insert((queue, id), value)?;
        if let Some((old_due, _, _)) = old.as_ref().and_then(|v| split_live(v.value())) {
            self.due.remove((queue, old_due, id))?;
        }
        if let Some((due, _, _)) = split_live(value) {
            self.due.insert((queue, due, id), ())?;
        }
        Ok(())
    }

    /// Removes a live delivery; its claim and encoding, if it was there.
    pub(super) fn take(
        &mut self,
        queue: &str,
        id: u128,
    ) -> Result<Option<(Option<FencingToken>, Vec<u8>)>> {
        let Some(old) = self.live.remove((queue, id))? else {
            return Ok(None);
        };
        self.journal.live_delete(queue, id);
        let Some((due, claim, delivery)) = split_live(old.value()) else {
            return Ok(None);
        };
        let taken = (claim, delivery.to_vec());
        drop(old);
        self.due.remove((queue, due, id))?;
        Ok(Some(taken))
    }

    /// Applies `op`; while `guard` says a machine crash may have lost claims whose attempts
    /// are still running, nothing is claimed.
    pub(super) fn apply(&mut self, op: QueueOp, guard: Guard) -> Result<QueueAnswer> {
        match op {
            QueueOp::Claim {
                queue,
                now,
                max,
                until,
            } => {
                let lease = Duration::from_millis(until.saturating_sub(now));
                if guard.wait(now, lease).is_some() {
                    return Ok(QueueAnswer::Claimed(Vec::new()));
                }
                self.claim(&queue, now, max, until)
            }
            QueueOp::Settle {
                queue,
                id,
                token,
                settlement,
            } => self
                .settle(&queue, id, token, &settlement)
                .map(QueueAnswer::Fenced),
            QueueOp::RetryDead { queue, id, now } => self.retry_dead(&queue, id, now),
            QueueOp::RemoveDead { queue, id } => {
                let removed = self.unbury(&queue, id_key(id))?.is_some();
                Ok(QueueAnswer::Done(removed))
            }
        }
    }

    fn claim(&mut self, queue: &str, now: u64, max: usize, until: u64) -> Result<QueueAnswer> {
        let mut due = Vec::new();
        for entry in self.due.range((queue, 0, 0)..=(queue, now, u128::MAX))? {
            if due.len() == max {
                break;
            }
            due.push(entry?.0.value().2);
        }
        let mut claimed = Vec::with_capacity(due.len());
        for id in due {
            let Some((_, raw)) = self.take(queue, id)? else {
                continue;
            };
            let token = FencingToken::generate();
            let raw = counted(raw);
            self.put(queue, id, until, Some(token), &raw)?;
            claimed.push((token, raw));
        }
        Ok(QueueAnswer::Claimed(claimed))
    }

    fn settle(
        &mut self,
        queue: &str,
        id: DeliveryId,
        token: FencingToken,
        settlement: &Settlement,
    ) -> Result<Fenced> {
        let key = id_key(id);
        let current = self
            .live
            .get((queue, key))?
            .and_then(|v| split_live(v.value()).map(|(_, c, _)| c));
        if current != Some(Some(token)) {
            return Ok(Fenced::LeaseLost);
        }
        let Some((_, raw)) = self.take(queue, key)? else {
            return Ok(Fenced::LeaseLost);
        };
        match settlement {
            Settlement::Delivered => {}
            Settlement::Retry { due, failure } => {
                let raw = with_failure(raw, failure.status, failure.error.as_deref());
                self.put(queue, key, unix_millis(*due), None, &raw)?;
            }
            Settlement::Dead { failure } => {
                let raw = with_failure(raw, failure.status, failure.error.as_deref());
                self.bury(queue, key, &raw)?;
            }
        }
        Ok(Fenced::Applied)
    }

    fn retry_dead(&mut self, queue: &str, id: DeliveryId, now: u64) -> Result<QueueAnswer> {
        let Some(raw) = self.unbury(queue, id_key(id))? else {
            return Ok(QueueAnswer::Done(false));
        };
        let raw = match Delivery::decode(raw.clone().into()) {
            Ok(mut delivery) => {
                delivery.attempts = 0;
                delivery.encode().to_vec()
            }
            // Revived as it is: its first claim reports it corrupt, as any read would.
            Err(_) => raw,
        };
        self.push(queue, id, now, &raw)?;
        Ok(QueueAnswer::Done(true))
    }
}

impl QueueTables<'_> {
    /// Keeps a dead delivery's encoding.
    pub(super) fn bury(&mut self, queue: &str, id: u128, raw: &[u8]) -> Result<()> {
        self.journal.dead_put(queue, id, raw);
        self.dead.insert((queue, id), raw)?;
        Ok(())
    }

    /// Removes a dead delivery; its encoding, if it was there.
    pub(super) fn unbury(&mut self, queue: &str, id: u128) -> Result<Option<Vec<u8>>> {
        let Some(raw) = self.dead.remove((queue, id))?.map(|v| v.value().to_vec()) else {
            return Ok(None);
        };
        self.journal.dead_delete(queue, id);
        Ok(Some(raw))
    }
}

/// The encoding with one more attempt counted; a corrupt one is handed out as it is, for the
/// reader to report.
fn counted(raw: Vec<u8>) -> Vec<u8> {
    match Delivery::decode(raw.clone().into()) {
        Ok(mut delivery) => {
            delivery.attempts = delivery.attempts.saturating_add(1);
            delivery.encode().to_vec()
        }
        Err(_) => raw,
    }
}

fn with_failure(raw: Vec<u8>, status: Option<http::StatusCode>, error: Option<&str>) -> Vec<u8> {
    match Delivery::decode(raw.clone().into()) {
        Ok(mut delivery) => {
            delivery.last_status = status;
            delivery.last_error = error.map(str::to_owned);
            delivery.encode().to_vec()
        }
        Err(_) => raw,
    }
}
