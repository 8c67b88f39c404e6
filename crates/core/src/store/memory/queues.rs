//! The memory store's inbox queues: one queue per route, behind one lock. The memory store
//! answers the [`Inbox`](crate::store::Inbox) operations from here.
//!
//! `accept` holds the record's shard lock while it queues the delivery, so a record and its
//! delivery appear together or not at all (locks are always taken shard first, queues second).
//! A queue keeps its live deliveries by id, an index ordered by due time (so `claim` takes the
//! earliest without scanning), and its dead deliveries by id (so listing pages in id order).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use std::ops::Bound;

use crate::model::{
    unix_millis, AttemptFailure, Delivery, DeliveryId, FencingToken, InboxQueues, RouteName,
};
use crate::store::answers::Fenced;
use crate::store::inbox::{Claim, Settlement};

/// Every route's queue, by route.
#[derive(Debug, Default)]
pub(super) struct MemoryQueues(Mutex<HashMap<RouteName, Queue>>);

#[derive(Debug, Default)]
struct Queue {
    live: HashMap<DeliveryId, Live>,
    /// `(due, id)` of every live delivery: the earliest due first.
    due: BTreeSet<(u64, DeliveryId)>,
    dead: BTreeMap<DeliveryId, Delivery>,
}

#[derive(Debug)]
struct Live {
    delivery: Delivery,
    due: u64,
    /// The latest claim; in flight while `due` (its lease) is ahead.
    claim: Option<FencingToken>,
}

impl Queue {
    fn push(&mut self, delivery: Delivery, due: u64) {
        self.due.insert((due, delivery.id));
        let live = Live {
            delivery,
            due,
            claim: None,
        };
        self.live.insert(live.delivery.id, live);
    }

    fn take(&mut self, id: DeliveryId) -> Option<Live> {
        let live = self.live.remove(&id)?;
        self.due.remove(&(live.due, id));
        Some(live)
    }

    /// Puts a taken delivery back, claimed until `until`, one attempt more.
    fn lease(&mut self, mut live: Live, until: u64) -> Claim {
        let token = FencingToken::generate();
        live.delivery.attempts = live.delivery.attempts.saturating_add(1);
        let claim = Claim {
            delivery: live.delivery.clone(),
            token,
        };
        self.due.insert((until, claim.delivery.id));
        let leased = Live {
            due: until,
            claim: Some(token),
            ..live
        };
        self.live.insert(claim.delivery.id, leased);
        claim
    }

    /// The live delivery `claim` is for, if that claim is still its latest.
    fn claimed(&mut self, claim: &Claim) -> Option<Live> {
        let current = self.live.get(&claim.delivery.id)?.claim == Some(claim.token);
        current.then(|| self.take(claim.delivery.id)).flatten()
    }
}

impl MemoryQueues {
    fn lock(&self) -> MutexGuard<'_, HashMap<RouteName, Queue>> {
        // Every change below leaves the maps consistent before it can panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with<T>(&self, queue: &RouteName, f: impl FnOnce(&mut Queue) -> T) -> T {
        f(self.lock().entry(queue.clone()).or_default())
    }

    /// Queues `delivery`, due at its arrival. The caller holds the lock of the record it goes
    /// with, so the two appear together.
    pub(super) fn push(&self, queue: &RouteName, delivery: Delivery) {
        let due = unix_millis(delivery.received_at);
        self.with(queue, |q| q.push(delivery, due));
    }

    pub(super) fn claim(
        &self,
        queue: &RouteName,
        now: SystemTime,
        max: usize,
        lease: Duration,
    ) -> Vec<Claim> {
        let (now_ms, until) = (unix_millis(now), millis_after(now, lease));
        self.with(queue, |queue| {
            let due: Vec<DeliveryId> = queue
                .due
                .iter()
                .take_while(|(due, _)| *due <= now_ms)
                .take(max)
                .map(|(_, id)| *id)
                .collect();
            let mut claims = Vec::with_capacity(due.len());
            for id in due {
                if let Some(live) = queue.take(id) {
                    claims.push(queue.lease(live, until));
                }
            }
            claims
        })
    }

    pub(super) fn settle(
        &self,
        queue: &RouteName,
        claim: &Claim,
        settlement: &Settlement,
    ) -> Fenced {
        let applied = self.with(queue, |queue| {
            let Some(mut live) = queue.claimed(claim) else {
                return false;
            };
            match settlement {
                Settlement::Delivered => {}
                Settlement::Retry { due, failure } => {
                    failed(&mut live.delivery, failure);
                    queue.push(live.delivery, unix_millis(*due));
                }
                Settlement::Dead { failure } => {
                    failed(&mut live.delivery, failure);
                    queue.dead.insert(live.delivery.id, live.delivery);
                }
            }
            true
        });
        if applied {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        }
    }

    pub(super) fn queues(&self, queue: &RouteName, now: SystemTime) -> InboxQueues {
        let now_ms = unix_millis(now);
        self.with(queue, |queue| {
            let in_flight = queue
                .live
                .values()
                .filter(|l| l.claim.is_some() && l.due > now_ms)
                .count() as u64;
            let arrivals = queue
                .live
                .values()
                .map(|l| unix_millis(l.delivery.received_at));
            let oldest = arrivals.min();
            InboxQueues {
                pending: queue.live.len() as u64 - in_flight,
                in_flight,
                dead: queue.dead.len() as u64,
                oldest_pending: Duration::from_millis(
                    oldest.map_or(0, |at| now_ms.saturating_sub(at)),
                ),
            }
        })
    }

    pub(super) fn dead(
        &self,
        queue: &RouteName,
        limit: usize,
        after: Option<DeliveryId>,
    ) -> Vec<Delivery> {
        self.with(queue, |queue| {
            let start = match after {
                Some(after) => Bound::Excluded(after),
                None => Bound::Unbounded,
            };
            let dead = queue.dead.range((start, Bound::Unbounded));
            dead.take(limit).map(|(_, d)| d.clone()).collect()
        })
    }

    pub(super) fn retry_dead(&self, queue: &RouteName, id: DeliveryId, now: SystemTime) -> bool {
        self.with(queue, |queue| {
            let Some(mut delivery) = queue.dead.remove(&id) else {
                return false;
            };
            delivery.attempts = 0;
            queue.push(delivery, unix_millis(now));
            true
        })
    }

    pub(super) fn remove_dead(&self, queue: &RouteName, id: DeliveryId) -> bool {
        self.with(queue, |queue| queue.dead.remove(&id).is_some())
    }
}

fn millis_after(at: SystemTime, span: Duration) -> u64 {
    unix_millis(at).saturating_add(span.as_millis().try_into().unwrap_or(u64::MAX))
}

fn failed(delivery: &mut Delivery, failure: &AttemptFailure) {
    delivery.last_status = failure.status;
    delivery.last_error.clone_from(&failure.error);
}
