//! What a batch changed, as the write-ahead log keeps it: the puts and deletes it made to the
//! primary tables, encoded as they happen (`replay.rs` applies them again after a crash).
//!
//! Physical changes rather than the operations themselves: an operation's effect depends on the
//! clock and on fresh fencing tokens, a put or delete depends on nothing, so replaying an entry
//! gives exactly the state the writer had. Only the primary tables are journaled; their index
//! tables (`expiries`, `inbox_due`) are maintained by the same `put` and `delete` on replay as
//! they were the first time.
//!
//! A change is a tag byte, then its fields: strings and values as a `u32` length (little
//! endian) and bytes, delivery ids as 16 bytes. An unknown tag is an error, never skipped: a
//! log written by a later release is refused rather than half applied.

pub(super) const RECORD_PUT: u8 = 1;
pub(super) const RECORD_DELETE: u8 = 2;
pub(super) const LIVE_PUT: u8 = 3;
pub(super) const LIVE_DELETE: u8 = 4;
pub(super) const DEAD_PUT: u8 = 5;
pub(super) const DEAD_DELETE: u8 = 6;

/// The encoded changes of one batch to one group of tables, appended as they are made.
#[derive(Default)]
pub(super) struct Journal {
    bytes: Vec<u8>,
}

impl Journal {
    pub(super) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub(super) fn record_put(&mut self, key: &str, value: &[u8]) {
        self.bytes.push(RECORD_PUT);
        self.field(key.as_bytes());
        self.field(value);
    }

    pub(super) fn record_delete(&mut self, key: &str) {
        self.bytes.push(RECORD_DELETE);
        self.field(key.as_bytes());
    }

    pub(super) fn live_put(&mut self, queue: &str, id: u128, value: &[u8]) {
        self.delivery(LIVE_PUT, queue, id);
        self.field(value);
    }

    pub(super) fn live_delete(&mut self, queue: &str, id: u128) {
        self.delivery(LIVE_DELETE, queue, id);
    }

    pub(super) fn dead_put(&mut self, queue: &str, id: u128, value: &[u8]) {
        self.delivery(DEAD_PUT, queue, id);
        self.field(value);
    }

    pub(super) fn dead_delete(&mut self, queue: &str, id: u128) {
        self.delivery(DEAD_DELETE, queue, id);
    }

    fn delivery(&mut self, tag: u8, queue: &str, id: u128) {
        self.bytes.push(tag);
        self.field(queue.as_bytes());
        self.bytes.extend_from_slice(&id.to_le_bytes());
    }

    fn field(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).expect("a stored value is smaller than 4 GiB");
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(bytes);
    }
}
