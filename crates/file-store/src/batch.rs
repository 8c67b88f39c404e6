//! What each queued write does to the tables, inside the writer's batch transaction.
//!
//! Each operation sees the effects of those before it in the batch, so a batch behaves exactly
//! like the same operations one after another: `reserve` looks up and inserts in the same
//! transaction, and the fenced writes act only on the in-flight record of the caller's token.

use std::time::Duration;

use redb::StorageError;
use tokio::sync::oneshot;

use super::guard::Guard;
use super::queue::{QueueAnswer, QueueOp, QueueTables};
use super::tables::{self, Tables};
use idempotency_core::model::{DeliveryId, FencingToken, Record};
use idempotency_core::store::{Fenced, Removal, Removed, StoreError};

/// A write, carrying the encoded record where there is one (with room for its expiry).
pub(super) enum Op {
    Reserve {
        key: String,
        value: Vec<u8>,
        lease: Duration,
    },
    Renew {
        key: String,
        token: FencingToken,
        lease: Duration,
    },
    Complete {
        key: String,
        token: FencingToken,
        value: Vec<u8>,
        ttl: Duration,
    },
    Release {
        key: String,
        token: FencingToken,
    },
    Remove {
        key: String,
        removal: Removal,
    },
    /// Records an inbox acknowledgement and queues its delivery, or finds the key's record.
    Accept {
        key: String,
        value: Vec<u8>,
        ttl: Duration,
        queue: String,
        id: DeliveryId,
        due: u64,
        delivery: Vec<u8>,
    },
    Queue(QueueOp),
}

impl Op {
    pub(super) fn touches_queues(&self) -> bool {
        matches!(self, Op::Accept { .. } | Op::Queue(_))
    }
}

pub(super) enum Answer {
    Acquired,
    /// `reserve` found a live record: its encoded bytes.
    Existing(Vec<u8>),
    Fenced(Fenced),
    Removed(Removed),
    Queue(QueueAnswer),
    /// `reserve` found no record, but reservations wait this long after a machine crash.
    Recovering(Duration),
}

/// Where a caller waits for its answer.
pub(super) type Reply = oneshot::Sender<Result<Answer, StoreError>>;

/// The time of a batch and the wait after a machine crash, which every operation applies by.
#[derive(Clone, Copy)]
pub(super) struct Clock {
    pub(super) now: u64,
    pub(super) guard: Guard,
}

impl Clock {
    fn until(self, life: Duration) -> u64 {
        let life = u64::try_from(life.as_millis()).unwrap_or(u64::MAX);
        self.now.saturating_add(life)
    }
}

pub(super) fn apply_one(
    tables: &mut Tables<'_>,
    queues: Option<&mut QueueTables<'_>>,
    op: Op,
    clock: Clock,
) -> Result<Answer, redb::Error> {
    let now = clock.now;
    let answer = match op {
        Op::Reserve { key, value, lease } => {
            let wait = clock.guard.wait(now, lease);
            reserve(tables, &key, value, now, clock.until(lease), wait)
        }
        Op::Renew { key, token, lease } => fenced(tables, &key, token, now, |tables, mut held| {
            tables::stamp(&mut held, clock.until(lease));
            tables.put(&key, &held)
        }),
        Op::Complete {
            key,
            token,
            mut value,
            ttl,
        } => fenced(tables, &key, token, now, |tables, _| {
            tables::stamp(&mut value, clock.until(ttl));
            tables.put(&key, &value)
        }),
        Op::Release { key, token } => fenced(tables, &key, token, now, |t, _| t.delete(&key)),
        Op::Remove { key, removal } => remove(tables, &key, removal, now),
        Op::Accept {
            key,
            value,
            ttl,
            queue,
            id,
            due,
            delivery,
        } => {
            let answer = reserve(tables, &key, value, now, clock.until(ttl), None)?;
            if let (Answer::Acquired, Some(queues)) = (&answer, queues) {
                queues.push(&queue, id, due, &delivery)?;
            }
            Ok(answer)
        }
        Op::Queue(op) => match queues {
            Some(queues) => queues.apply(op, clock.guard).map(Answer::Queue),
            None => Err(StorageError::Io(std::io::Error::other(
                "the queue tables were not opened",
            ))),
        },
    };
    Ok(answer?)
}

/// The live record under `key`, or else `value` written there, in the same transaction; a
/// fresh reservation is refused while the wait after a machine crash lasts.
fn reserve(
    tables: &mut Tables<'_>,
    key: &str,
    mut value: Vec<u8>,
    now: u64,
    expiry: u64,
    wait: Option<Duration>,
) -> Result<Answer, StorageError> {
    if let Some(existing) = tables.live(key, now)? {
        return Ok(Answer::Existing(tables::record(&existing).to_vec()));
    }
    if let Some(wait) = wait {
        return Ok(Answer::Recovering(wait));
    }
    tables::stamp(&mut value, expiry);
    tables.put(key, &value)?;
    Ok(Answer::Acquired)
}

/// Runs `write` with the held value only if `token` still holds `key`.
fn fenced(
    tables: &mut Tables<'_>,
    key: &str,
    token: FencingToken,
    now: u64,
    write: impl FnOnce(&mut Tables<'_>, Vec<u8>) -> Result<(), StorageError>,
) -> Result<Answer, StorageError> {
    let Some(held) = tables.held_by(key, token, now)? else {
        return Ok(Answer::Fenced(Fenced::LeaseLost));
    };
    write(tables, held)?;
    Ok(Answer::Fenced(Fenced::Applied))
}

fn remove(
    tables: &mut Tables<'_>,
    key: &str,
    removal: Removal,
    now: u64,
) -> Result<Answer, StorageError> {
    let Some(value) = tables.live(key, now)? else {
        return Ok(Answer::Removed(Removed::Missing));
    };
    let in_flight = Record::encoded_in_flight(tables::record(&value));
    if in_flight && removal == Removal::CompletedOnly {
        return Ok(Answer::Removed(Removed::KeptInFlight));
    }
    tables.delete(key)?;
    Ok(Answer::Removed(Removed::Removed))
}
