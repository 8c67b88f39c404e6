//! The file store's inbox queues: per route, the live deliveries (due time, latest claim, place
//! in the log), an index of them by due time, and the dead ones; and the writes the writer
//! thread applies to them. The deliveries themselves stay in the log, read when claimed or
//! listed.
//!
//! A live delivery's stored value is its due time (8 bytes), its latest claim's token (8) and
//! whether it has one (1), then `Delivery::encode()`; a dead one's is its encoding. Ids sort by
//! arrival, so a queue's first entry is its oldest delivery. `accept` writes the acknowledgement
//! record and the delivery in the one entry that holds every other change of its batch, logged
//! and synced before anyone hears of it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::ops::Bound;
use std::time::Duration;

use super::batch::Batch;
use super::journal::Loc;
use idempotency_core::backend::{unix_millis, Delivery, DeliveryId, FencingToken, InboxQueues};
use idempotency_core::backend::{Fenced, Settlement};

/// Due time, claim token, claimed flag.
const LIVE_HEADER: usize = 17;

/// A delivery id as the queues order it: numeric order is the id's byte order.
pub(super) fn id_key(id: DeliveryId) -> u128 {
    u128::from_be_bytes(*id.as_bytes())
}

/// A live delivery's value taken apart: due time, latest claim, encoded delivery.
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
    Count {
        queue: String,
        now: u64,
    },
    ListDead {
        queue: String,
        limit: usize,
        after: Option<DeliveryId>,
    },
}

pub(super) enum QueueAnswer {
    /// Claimed deliveries: each one's token and its encoding, attempts counted.
    Claimed(Vec<(FencingToken, Vec<u8>)>),
    Fenced(Fenced),
    Done(bool),
    Counted(InboxQueues),
    /// Dead deliveries' encodings, in id order.
    Listed(Vec<Vec<u8>>),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Live {
    pub(super) due: u64,
    pub(super) claim: Option<FencingToken>,
    pub(super) loc: Loc,
}

#[derive(Debug, Default)]
pub(super) struct Queue {
    pub(super) live: BTreeMap<u128, Live>,
    due: BTreeSet<(u64, u128)>,
    pub(super) dead: BTreeMap<u128, Loc>,
}

impl Queue {
    pub(super) fn set_live(&mut self, id: u128, live: Live) -> Option<Live> {
        let old = self.live.insert(id, live);
        if let Some(old) = old {
            self.due.remove(&(old.due, id));
        }
        self.due.insert((live.due, id));
        old
    }

    pub(super) fn take_live(&mut self, id: u128) -> Option<Live> {
        let old = self.live.remove(&id)?;
        self.due.remove(&(old.due, id));
        Some(old)
    }
}

/// Every route's queue.
#[derive(Debug, Default)]
pub(super) struct Queues {
    pub(super) queues: HashMap<String, Queue>,
}

type Result<T> = io::Result<T>;

impl Queues {
    pub(super) fn queue(&mut self, name: &str) -> &mut Queue {
        if !self.queues.contains_key(name) {
            self.queues.insert(name.to_owned(), Queue::default());
        }
        self.queues.get_mut(name).expect("inserted above")
    }

    /// Queues an encoded delivery, due at `due`, unclaimed.
    pub(super) fn push(&mut self, b: &mut Batch<'_>, queue: &str, id: u128, due: u64, raw: &[u8]) {
        self.put(b, queue, id, due, None, raw);
    }

    fn put(
        &mut self,
        b: &mut Batch<'_>,
        queue: &str,
        id: u128,
        due: u64,
        claim: Option<FencingToken>,
        raw: &[u8],
    ) {
        let loc = b.put_delivery(queue, id, &join_live(due, claim, raw), false);
        if let Some(old) = self.queue(queue).set_live(id, Live { due, claim, loc }) {
            b.space.delivery_replaced(old.loc);
        }
    }

    /// Removes a live delivery; its claim and encoding, if it was there.
    fn take(&mut self, b: &mut Batch<'_>, queue: &str, id: u128) -> Result<Option<Vec<u8>>> {
        let Some(live) = self.queue(queue).take_live(id) else {
            return Ok(None);
        };
        let value = b.read_value(live.loc)?;
        b.delete_delivery(queue, id, live.loc, false);
        Ok(split_live(&value).map(|(_, _, raw)| raw.to_vec()))
    }

    /// Applies `op`; while `b.guard` says a machine crash may have lost claims whose attempts
    /// are still running, nothing is claimed.
    pub(super) fn apply(&mut self, b: &mut Batch<'_>, op: QueueOp) -> Result<QueueAnswer> {
        match op {
            QueueOp::Claim {
                queue,
                now,
                max,
                until,
            } => {
                let lease = Duration::from_millis(until.saturating_sub(now));
                if b.guard.wait(now, lease).is_some() {
                    return Ok(QueueAnswer::Claimed(Vec::new()));
                }
                self.claim(b, &queue, now, max, until)
            }
            QueueOp::Settle {
                queue,
                id,
                token,
                settlement,
            } => self
                .settle(b, &queue, id_key(id), token, &settlement)
                .map(QueueAnswer::Fenced),
            QueueOp::RetryDead { queue, id, now } => self.retry_dead(b, &queue, id_key(id), now),
            QueueOp::RemoveDead { queue, id } => {
                let removed = self.unbury(b, &queue, id_key(id))?.is_some();
                Ok(QueueAnswer::Done(removed))
            }
            QueueOp::Count { queue, now } => Ok(QueueAnswer::Counted(self.count(&queue, now))),
            QueueOp::ListDead {
                queue,
                limit,
                after,
            } => self.list_dead(b, &queue, limit, after),
        }
    }

    fn claim(
        &mut self,
        b: &mut Batch<'_>,
        queue: &str,
        now: u64,
        max: usize,
        until: u64,
    ) -> Result<QueueAnswer> {
        let due: Vec<u128> = self
            .queue(queue)
            .due
            .range(..=(now, u128::MAX))
            .take(max)
            .map(|(_, id)| *id)
            .collect();
        let mut claimed = Vec::with_capacity(due.len());
        for id in due {
            let Some(live) = self.queue(queue).live.get(&id).copied() else {
                continue;
            };
            let value = b.read_value(live.loc)?;
            let raw = split_live(&value).map_or(&[][..], |(_, _, raw)| raw);
            let token = FencingToken::generate();
            let raw = counted(raw);
            self.put(b, queue, id, until, Some(token), &raw);
            claimed.push((token, raw));
        }
        Ok(QueueAnswer::Claimed(claimed))
    }

    fn settle(
        &mut self,
        b: &mut Batch<'_>,
        queue: &str,
        id: u128,
        token: FencingToken,
        settlement: &Settlement,
    ) -> Result<Fenced> {
        let current = self.queue(queue).live.get(&id).map(|live| live.claim);
        if current != Some(Some(token)) {
            return Ok(Fenced::LeaseLost);
        }
        let Some(raw) = self.take(b, queue, id)? else {
            return Ok(Fenced::LeaseLost);
        };
        match settlement {
            Settlement::Delivered => {}
            Settlement::Retry { due, failure } => {
                let raw = with_failure(&raw, failure.status, failure.error.as_deref());
                self.push(b, queue, id, unix_millis(*due), &raw);
            }
            Settlement::Dead { failure } => {
                let raw = with_failure(&raw, failure.status, failure.error.as_deref());
                self.bury(b, queue, id, &raw);
            }
        }
        Ok(Fenced::Applied)
    }

    fn retry_dead(
        &mut self,
        b: &mut Batch<'_>,
        queue: &str,
        id: u128,
        now: u64,
    ) -> Result<QueueAnswer> {
        let Some(raw) = self.unbury(b, queue, id)? else {
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
        self.push(b, queue, id, now, &raw);
        Ok(QueueAnswer::Done(true))
    }

    /// Keeps a dead delivery's encoding.
    fn bury(&mut self, b: &mut Batch<'_>, queue: &str, id: u128, raw: &[u8]) {
        let loc = b.put_delivery(queue, id, raw, true);
        if let Some(old) = self.queue(queue).dead.insert(id, loc) {
            b.space.delivery_replaced(old);
        }
    }

    /// Removes a dead delivery; its encoding, if it was there.
    fn unbury(&mut self, b: &mut Batch<'_>, queue: &str, id: u128) -> Result<Option<Vec<u8>>> {
        let Some(loc) = self.queue(queue).dead.remove(&id) else {
            return Ok(None);
        };
        let raw = b.read_value(loc)?;
        b.delete_delivery(queue, id, loc, true);
        Ok(Some(raw))
    }

    fn count(&self, queue: &str, now: u64) -> InboxQueues {
        let mut counted = InboxQueues::default();
        let Some(queue) = self.queues.get(queue) else {
            return counted;
        };
        for live in queue.live.values() {
            match live.claim {
                Some(_) if live.due > now => counted.in_flight += 1,
                _ => counted.pending += 1,
            }
        }
        // An id starts with its arrival in milliseconds, so the first is the oldest.
        let oldest = queue.live.keys().next().map(|id| (id >> 64) as u64);
        counted.oldest_pending =
            Duration::from_millis(oldest.map_or(0, |at| now.saturating_sub(at)));
        counted.dead = queue.dead.len() as u64;
        counted
    }

    fn list_dead(
        &self,
        b: &mut Batch<'_>,
        queue: &str,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Result<QueueAnswer> {
        let Some(queue) = self.queues.get(queue) else {
            return Ok(QueueAnswer::Listed(Vec::new()));
        };
        let start = after.map_or(Bound::Unbounded, |after| Bound::Excluded(id_key(after)));
        let locs: Vec<Loc> = queue
            .dead
            .range((start, Bound::Unbounded))
            .take(limit)
            .map(|(_, loc)| *loc)
            .collect();
        let listed = locs.into_iter().map(|loc| b.read_value(loc));
        Ok(QueueAnswer::Listed(listed.collect::<Result<_>>()?))
    }
}

/// The encoding with one more attempt counted; a corrupt one is handed out as it is, for the
/// reader to report.
fn counted(raw: &[u8]) -> Vec<u8> {
    match Delivery::decode(raw.to_vec().into()) {
        Ok(mut delivery) => {
            delivery.attempts = delivery.attempts.saturating_add(1);
            delivery.encode().to_vec()
        }
        Err(_) => raw.to_vec(),
    }
}

fn with_failure(raw: &[u8], status: Option<http::StatusCode>, error: Option<&str>) -> Vec<u8> {
    match Delivery::decode(raw.to_vec().into()) {
        Ok(mut delivery) => {
            delivery.last_status = status;
            delivery.last_error = error.map(str::to_owned);
            delivery.encode().to_vec()
        }
        Err(_) => raw.to_vec(),
    }
}
