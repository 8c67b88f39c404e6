//! What each record operation does, on the writer thread, to the index and the batch's entry.
//!
//! Each operation sees the effects of those before it in the batch, so a batch behaves exactly
//! like the same operations one after another: `reserve` looks up and writes in one step of the
//! one thread that writes, and the fenced writes act only on the in-flight record of the
//! caller's token. A keyed first request touches memory only: its reservation is not found in
//! either map, its completion finds the in-flight record it replaces in memory. A completed
//! record is read from the log only when it is asked for (a replay from the store, `get`, an
//! admin delete).

use std::hash::RandomState;
use std::io;
use std::time::Duration;

use super::batch::{Answer, Batch};
use super::index::{Completed, Held, InFlight, KeyDigest};
use super::journal::Loc;
use super::space::Space;
use super::values;
use idempotency_core::backend::{Fenced, Removal, Removed};
use idempotency_core::backend::{FencingToken, Record, ScopedKey};

/// A key's live record.
enum Live {
    InFlight,
    Completed { loc: Loc, value: Vec<u8> },
}

pub(super) struct Records {
    completed: Completed,
    in_flight: InFlight,
}

fn digest(key: &ScopedKey) -> KeyDigest {
    KeyDigest::from_sha256(key.name_digest())
}

impl Records {
    pub(super) fn new(secret: &RandomState) -> Self {
        Self {
            completed: Completed::new(secret),
            in_flight: InFlight::new(secret),
        }
    }

    /// How many records the index holds, counting expired ones not forgotten yet.
    pub(super) fn len(&self) -> usize {
        self.completed.len() + self.in_flight.len()
    }

    fn live(&self, b: &mut Batch<'_>, key: &KeyDigest) -> io::Result<Option<Live>> {
        if let Some(held) = self.in_flight.get(key) {
            return Ok((held.expiry() > b.now).then_some(Live::InFlight));
        }
        let Some(loc) = self.completed.get(key) else {
            return Ok(None);
        };
        let value = b.read_value(loc)?;
        Ok((values::expiry(&value) > b.now).then_some(Live::Completed { loc, value }))
    }

    /// The live record's stored value, if there is one.
    pub(super) fn get(&self, b: &mut Batch<'_>, key: &ScopedKey) -> io::Result<Option<Vec<u8>>> {
        let key = digest(key);
        Ok(match self.live(b, &key)? {
            Some(Live::InFlight) => self.in_flight.get(&key).map(|held| held.value.to_vec()),
            Some(Live::Completed { value, .. }) => Some(value),
            None => None,
        })
    }

    /// The live record's encoding, or else `value` written there to live until `expiry`; a
    /// fresh write is refused while `wait` lasts (the wait after a machine crash).
    pub(super) fn reserve(
        &mut self,
        b: &mut Batch<'_>,
        key: &ScopedKey,
        mut value: Vec<u8>,
        expiry: u64,
        wait: Option<Duration>,
    ) -> io::Result<Answer> {
        let digest = digest(key);
        match self.live(b, &digest)? {
            Some(Live::InFlight) => {
                let held = self
                    .in_flight
                    .get(&digest)
                    .map(|held| held.record().to_vec());
                return Ok(Answer::Existing(held.unwrap_or_default()));
            }
            Some(Live::Completed { value, .. }) => {
                return Ok(Answer::Existing(values::record(&value).to_vec()));
            }
            None => {}
        }
        if let Some(wait) = wait {
            return Ok(Answer::Recovering(wait));
        }
        values::stamp(&mut value, expiry);
        let loc = b.put_record(key.storage_key(), &value);
        self.current(digest, loc, value);
        Ok(Answer::Acquired)
    }

    /// Makes the value just written at `loc` the key's record, in the map its state belongs in.
    fn current(&mut self, key: KeyDigest, loc: Loc, value: Vec<u8>) {
        // An expired record is what this one replaces: its count was of a second gone by.
        self.in_flight.remove(&key);
        if Record::encoded_in_flight(values::record(&value)) {
            self.completed.remove(&key);
            let value = value.into_boxed_slice();
            self.in_flight.insert(key, Held { loc, value });
        } else {
            self.completed.insert(key, loc);
        }
    }

    /// The in-flight record of `token` under `key`, if it is live.
    fn held_by(&mut self, key: &KeyDigest, token: FencingToken, now: u64) -> Option<&mut Held> {
        let held = self.in_flight.get_mut(key)?;
        let ours = held.expiry() > now && held.record().starts_with(&token.in_flight_prefix());
        ours.then_some(held)
    }

    pub(super) fn renew(
        &mut self,
        b: &mut Batch<'_>,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Answer {
        let until = b.until(lease);
        let Some(held) = self.held_by(&digest(key), token, b.now) else {
            return Answer::Fenced(Fenced::LeaseLost);
        };
        let (old, expiry) = (held.loc, held.expiry());
        values::stamp(&mut held.value, until);
        held.loc = b.put_record(key.storage_key(), &held.value);
        b.space.record_replaced(old, expiry);
        Answer::Fenced(Fenced::Applied)
    }

    /// Replaces the in-flight record of `token` with `value` (stamped to expire after `ttl`),
    /// or deletes it when there is no value.
    pub(super) fn settle(
        &mut self,
        b: &mut Batch<'_>,
        key: &ScopedKey,
        token: FencingToken,
        outcome: Option<(Vec<u8>, Duration)>,
    ) -> Answer {
        let digest = digest(key);
        if self.held_by(&digest, token, b.now).is_none() {
            return Answer::Fenced(Fenced::LeaseLost);
        }
        let held = self.in_flight.remove(&digest).expect("held just now");
        b.space.record_replaced(held.loc, held.expiry());
        match outcome {
            Some((mut value, ttl)) => {
                values::stamp(&mut value, b.until(ttl));
                let loc = b.put_record(key.storage_key(), &value);
                self.completed.insert(digest, loc);
            }
            None => b.delete_record(key.storage_key()),
        }
        Answer::Fenced(Fenced::Applied)
    }

    pub(super) fn remove(
        &mut self,
        b: &mut Batch<'_>,
        key: &ScopedKey,
        removal: Removal,
    ) -> io::Result<Answer> {
        let digest = digest(key);
        let (loc, expiry) = match self.live(b, &digest)? {
            None => return Ok(Answer::Removed(Removed::Missing)),
            Some(Live::InFlight) if removal == Removal::CompletedOnly => {
                return Ok(Answer::Removed(Removed::KeptInFlight));
            }
            Some(Live::InFlight) => {
                let held = self.in_flight.remove(&digest).expect("live just now");
                (held.loc, held.expiry())
            }
            Some(Live::Completed { loc, value }) => {
                self.completed.remove(&digest);
                (loc, values::expiry(&value))
            }
        };
        b.space.record_replaced(loc, expiry);
        b.delete_record(key.storage_key());
        Ok(Answer::Removed(Removed::Removed))
    }

    /// Forgets in-flight records that expired by `now`.
    pub(super) fn forget_expired(&mut self, now: u64) {
        self.in_flight.forget_expired(now);
    }
}

/// The log read again at open, and retired segments' records moved on.
impl Records {
    /// A put found in the log at `loc`.
    pub(super) fn replay_put(&mut self, space: &mut Space, loc: Loc, key: &str, value: &[u8]) {
        let digest = KeyDigest::of_name(key);
        if let Some(held) = self.in_flight.get(&digest) {
            space.record_replaced(held.loc, held.expiry());
        }
        space.changed(loc.segment());
        space.record_current(loc, values::expiry(value));
        self.current(digest, loc, value.to_vec());
    }

    /// A delete found in the log.
    pub(super) fn replay_delete(&mut self, space: &mut Space, segment: u32, key: &str) {
        let digest = KeyDigest::of_name(key);
        if let Some(held) = self.in_flight.remove(&digest) {
            space.record_replaced(held.loc, held.expiry());
        }
        self.completed.remove(&digest);
        space.changed(segment);
    }

    /// The put at `loc` of a segment being retired: written again at the head if it is still
    /// the key's record and `value` (given while it had not expired) is live, forgotten if it
    /// is the key's record no longer live, left alone if the key has moved on.
    pub(super) fn retire(&mut self, b: &mut Batch<'_>, key: &str, loc: Loc, value: Option<&[u8]>) {
        let digest = KeyDigest::of_name(key);
        let current = match self.in_flight.get(&digest) {
            Some(held) => held.loc == loc,
            None => self.completed.get(&digest) == Some(loc),
        };
        if !current {
            return;
        }
        if let Some(value) = value.filter(|value| values::expiry(value) > b.now) {
            let moved = b.put_record(key, value);
            self.current(digest, moved, value.to_vec());
        } else {
            self.in_flight.remove(&digest);
            self.completed.remove(&digest);
        }
    }
}
