//! The changes of a log entry applied again to the tables, when the store opens after a crash.

use redb::StorageError;

use super::journal::{DEAD_DELETE, DEAD_PUT, LIVE_DELETE, LIVE_PUT, RECORD_DELETE, RECORD_PUT};
use super::queue::QueueTables;
use super::tables::Tables;

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
