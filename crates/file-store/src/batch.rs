//! What the writer thread is asked to do (`Op`), what it answers (`Answer`), and the batch an
//! operation is applied in: the changes it writes to the log's next entry, the reads it makes
//! of the log, and each segment's counts kept as it goes.

use std::time::Duration;

use tokio::sync::oneshot;

use super::change::{Change, Reader};
use super::guard::Guard;
use super::journal::{Journal, Loc};
use super::log::Log;
use super::queue::{QueueAnswer, QueueOp};
use super::space::Space;
use super::values;
use idempotency_core::backend::{DeliveryId, FencingToken, ScopedKey};
use idempotency_core::{
    backend::{Fenced, Removal, Removed},
    StoreError,
};

/// A write or a read, carrying the encoded record where there is one (with room for its expiry).
pub(super) enum Op {
    Reserve {
        key: ScopedKey,
        value: Vec<u8>,
        lease: Duration,
    },
    Renew {
        key: ScopedKey,
        token: FencingToken,
        lease: Duration,
    },
    Complete {
        key: ScopedKey,
        token: FencingToken,
        value: Vec<u8>,
        ttl: Duration,
    },
    Release {
        key: ScopedKey,
        token: FencingToken,
    },
    Remove {
        key: ScopedKey,
        removal: Removal,
    },
    Get {
        key: ScopedKey,
    },
    /// Records an inbox acknowledgement and queues its delivery, or finds the key's record.
    Accept {
        key: ScopedKey,
        value: Vec<u8>,
        ttl: Duration,
        id: DeliveryId,
        due: u64,
        delivery: Vec<u8>,
    },
    Queue(QueueOp),
    /// How many records the index holds, expired ones not forgotten yet included.
    Count,
    Ping,
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
    /// `get`: the live record's stored value (its expiry, then its encoding).
    Record(Option<Vec<u8>>),
    Count(u64),
    Pong,
}

/// Where a caller waits for its answer.
pub(super) type Reply = oneshot::Sender<Result<Answer, StoreError>>;

/// One batch being applied: its entry's changes, the log to read from, the counts to keep.
pub(super) struct Batch<'a> {
    pub(super) journal: Journal,
    pub(super) log: &'a mut Log,
    pub(super) space: &'a mut Space,
    /// The time every operation of the batch applies by (unix ms).
    pub(super) now: u64,
    /// The wait after a machine crash.
    pub(super) guard: Guard,
}

impl Batch<'_> {
    /// The time `life` from now, in unix ms.
    pub(super) fn until(&self, life: Duration) -> u64 {
        let life = u64::try_from(life.as_millis()).unwrap_or(u64::MAX);
        self.now.saturating_add(life)
    }

    /// Writes a stamped record value under `key`, current from now on.
    pub(super) fn put_record(&mut self, key: &str, value: &[u8]) -> Loc {
        let loc = self.journal.record_put(key, value);
        self.space.changed(loc.segment());
        self.space.record_current(loc, values::expiry(value));
        loc
    }

    pub(super) fn delete_record(&mut self, key: &str) {
        self.journal.record_delete(key);
        self.space.changed(self.log.head());
    }

    /// Writes a delivery's value (live or dead), current from now on.
    pub(super) fn put_delivery(&mut self, queue: &str, id: u128, value: &[u8], dead: bool) -> Loc {
        let loc = match dead {
            false => self.journal.live_put(queue, id, value),
            true => self.journal.dead_put(queue, id, value),
        };
        self.space.changed(loc.segment());
        self.space.delivery_current(loc);
        loc
    }

    /// Deletes a delivery that was at `loc`.
    pub(super) fn delete_delivery(&mut self, queue: &str, id: u128, loc: Loc, dead: bool) {
        match dead {
            false => self.journal.live_delete(queue, id),
            true => self.journal.dead_delete(queue, id),
        }
        self.space.changed(self.log.head());
        self.space.delivery_replaced(loc);
    }

    /// The value of the put at `loc` (a record's or a delivery's).
    pub(super) fn read_value(&mut self, loc: Loc) -> std::io::Result<Vec<u8>> {
        let bytes = self.log.read(loc, &self.journal)?;
        match Reader::new(&bytes).next_change() {
            Ok(Some(
                Change::RecordPut { value, .. }
                | Change::LivePut { value, .. }
                | Change::DeadPut { value, .. },
            )) => Ok(value.to_vec()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "segment {} holds no put at byte {}",
                    loc.segment(),
                    loc.offset()
                ),
            )),
        }
    }
}
