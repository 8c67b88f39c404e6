//! Each destination's share of the slots (`destination_concurrency`): a receiver that hangs
//! holds at most its share, and the rows of the other destinations keep flowing.
//!
//! A destination with no room left is kept out of the claim itself: its topics are named in
//! the claim's filter, so its rows are neither claimed nor hold a slot or a lease while they
//! wait, and a claim is never spent on them. A claim may still return more rows of one
//! destination than it has room for (the claim knows each destination's room, not which
//! destination its due rows go to); those are given back in the claim's own transaction,
//! before it commits, as if never claimed. When a full destination gets room again, the claim
//! loop is woken, so its rows wait for a slot of their own and not for the next poll.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::OutboxConfig;
use crate::row::ClaimedRow;

/// The slots of each destination URL of one outbox.
#[derive(Debug)]
pub(crate) struct Rooms {
    /// Each destination URL's slots, `destination_concurrency` of them.
    by_url: HashMap<String, Arc<Semaphore>>,
    /// Each topic `topics` lists, with its destination URL.
    listed: Vec<(String, String)>,
    /// `deliver_to`'s URL: where every topic not listed goes.
    fallback: Option<String>,
}

/// What a claim may take, given each destination's room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimFilter {
    /// Listed topics whose destination has no room: their rows are not claimed.
    pub(crate) excluded: Vec<String>,
    /// When `deliver_to` has no room: the only topics whose rows may be claimed (the listed
    /// ones whose destination has room). `None`: any topic not excluded.
    pub(crate) only: Option<Vec<String>>,
    /// The most rows the destinations with room take, all together.
    pub(crate) room: usize,
}

/// A destination slot an attempt holds until its destination has answered; none for a row
/// that has no destination (it is dead at once).
#[derive(Debug)]
pub(crate) struct Room(Option<OwnedSemaphorePermit>);

impl Room {
    /// Gives the slot back; if the destination had no room left, wakes the claim loop, whose
    /// claims have left that destination's rows out until now.
    pub(crate) fn free(self, wake: &Notify) {
        let Some(permit) = self.0 else {
            return;
        };
        let was_full = permit.semaphore().available_permits() == 0;
        drop(permit);
        if was_full {
            wake.notify_one();
        }
    }
}

/// What an attempt holds from its claim until its destination has answered: one of the
/// relay's slots, and one of its destination's.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) relay: OwnedSemaphorePermit,
    pub(crate) room: Room,
}

impl Slot {
    /// Gives both back (see [`Room::free`]).
    pub(crate) fn free(self, wake: &Notify) {
        drop(self.relay);
        self.room.free(wake);
    }
}

impl ClaimFilter {
    /// Whether the claim leaves any destination out.
    pub(crate) fn narrowed(&self) -> bool {
        !self.excluded.is_empty() || self.only.is_some()
    }
}

impl Rooms {
    /// `destination_concurrency` slots for each destination URL of `config`.
    pub(crate) fn new(config: &OutboxConfig) -> Self {
        let limit = config.destination_limit();
        let mut by_url = HashMap::new();
        for url in config.deliver_to.iter().chain(config.topics.values()) {
            by_url
                .entry(url.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(limit)));
        }
        let listed = config
            .topics
            .iter()
            .map(|(topic, url)| (topic.clone(), url.to_string()))
            .collect();
        Self {
            by_url,
            listed,
            fallback: config.deliver_to.as_ref().map(ToString::to_string),
        }
    }

    fn room(&self, url: &str) -> usize {
        self.by_url.get(url).map_or(0, |s| s.available_permits())
    }

    /// What the next claim may take now.
    pub(crate) fn filter(&self) -> ClaimFilter {
        let full = |url: &str| self.room(url) == 0;
        let excluded = self
            .listed
            .iter()
            .filter(|(_, url)| full(url))
            .map(|(topic, _)| topic.clone())
            .collect();
        let only = self.fallback.as_deref().filter(|url| full(url)).map(|_| {
            let open = self.listed.iter().filter(|(_, url)| !full(url));
            open.map(|(topic, _)| topic.clone()).collect()
        });
        // A row without a destination (a topic not listed, and no deliver_to) takes no room:
        // it is claimed along with the others, to be made dead.
        let room = self.by_url.keys().map(|url| self.room(url)).sum();
        ClaimFilter {
            excluded,
            only,
            room,
        }
    }

    /// Shares claimed rows out: each row whose destination still has room, with its slot, and
    /// the rows for which there was none (to be given back).
    pub(crate) fn share(
        &self,
        config: &OutboxConfig,
        rows: Vec<ClaimedRow>,
    ) -> (Vec<(ClaimedRow, Room)>, Vec<ClaimedRow>) {
        let mut taken = Vec::with_capacity(rows.len());
        let mut over = Vec::new();
        for row in rows {
            let Some(url) = config.destination(&row.topic) else {
                taken.push((row, Room(None)));
                continue;
            };
            let slots = self.by_url.get(&url.to_string());
            match slots.map(|s| s.clone().try_acquire_owned()) {
                Some(Ok(permit)) => taken.push((row, Room(Some(permit)))),
                Some(Err(_)) => over.push(row),
                None => taken.push((row, Room(None))),
            }
        }
        (taken, over)
    }
}

#[cfg(test)]
#[path = "rooms_tests.rs"]
mod tests;
