//! What a batch changed, as the write-ahead log keeps it: the puts and deletes it made to the
//! primary tables, encoded as they happen, and their replay into the tables after a crash.
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

use redb::StorageError;

use super::queue::QueueTables;
use super::tables::Tables;

const RECORD_PUT: u8 = 1;
const RECORD_DELETE: u8 = 2;
const LIVE_PUT: u8 = 3;
const LIVE_DELETE: u8 = 4;
const DEAD_PUT: u8 = 5;
const DEAD_DELETE: u8 = 6;

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

/// Why an entry's changes could not be replayed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReplayError {
    #[error("a log entry is malformed: {0}")]
    Malformed(&'static str),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Reads an entry's changes back, one field at a time.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], ReplayError> {
        if self.rest.len() < len {
            return Err(ReplayError::Malformed(
                "a change runs past the end of its entry",
            ));
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn field(&mut self) -> Result<&'a [u8], ReplayError> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("four bytes"));
        self.take(len as usize)
    }

    fn text(&mut self) -> Result<&'a str, ReplayError> {
        std::str::from_utf8(self.field()?).map_err(|_| ReplayError::Malformed("a key is not UTF-8"))
    }

    fn delivery(&mut self) -> Result<(&'a str, u128), ReplayError> {
        let queue = self.text()?;
        let id = u128::from_le_bytes(self.take(16)?.try_into().expect("sixteen bytes"));
        Ok((queue, id))
    }
}

/// Applies the changes encoded in `payload` to the tables, in the order they were made.
pub(super) fn replay(
    payload: &[u8],
    tables: &mut Tables<'_>,
    queues: &mut QueueTables<'_>,
) -> Result<(), ReplayError> {
    let mut reader = Reader { rest: payload };
    while let Some((&tag, rest)) = reader.rest.split_first() {
        reader.rest = rest;
        match tag {
            RECORD_PUT => {
                let key = reader.text()?;
                tables.put(key, reader.field()?)?;
            }
            RECORD_DELETE => tables.delete(reader.text()?)?,
            LIVE_PUT => {
                let (queue, id) = reader.delivery()?;
                queues.put_value(queue, id, reader.field()?)?;
            }
            LIVE_DELETE => {
                let (queue, id) = reader.delivery()?;
                queues.take(queue, id)?;
            }
            DEAD_PUT => {
                let (queue, id) = reader.delivery()?;
                queues.bury(queue, id, reader.field()?)?;
            }
            DEAD_DELETE => {
                let (queue, id) = reader.delivery()?;
                queues.unbury(queue, id)?;
            }
            _ => return Err(ReplayError::Malformed("a change of an unknown kind")),
        }
    }
    Ok(())
}
