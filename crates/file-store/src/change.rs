//! A change read back from the log (`journal.rs` writes them): at open, when a segment is
//! retired, and when a record or delivery is read at its place.

use super::journal::{DEAD_DELETE, DEAD_PUT, LIVE_DELETE, LIVE_PUT, RECORD_DELETE, RECORD_PUT};

/// One change, borrowing from the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change<'a> {
    RecordPut {
        key: &'a str,
        value: &'a [u8],
    },
    RecordDelete {
        key: &'a str,
    },
    LivePut {
        queue: &'a str,
        id: u128,
        value: &'a [u8],
    },
    LiveDelete {
        queue: &'a str,
        id: u128,
    },
    DeadPut {
        queue: &'a str,
        id: u128,
        value: &'a [u8],
    },
    DeadDelete {
        queue: &'a str,
        id: u128,
    },
}

/// Why bytes are not a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Malformed {
    #[error("a change runs past the end of its entry")]
    Short,
    #[error("a key or queue name is not UTF-8")]
    NotText,
    #[error("a change of an unknown kind (written by a later release?)")]
    UnknownKind,
}

/// Reads changes one field at a time.
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// How many bytes are left: the reader's place, counted from the end.
    pub(super) fn left(&self) -> usize {
        self.rest.len()
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], Malformed> {
        if self.rest.len() < len {
            return Err(Malformed::Short);
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn field(&mut self) -> Result<&'a [u8], Malformed> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("four bytes"));
        self.take(len as usize)
    }

    fn text(&mut self) -> Result<&'a str, Malformed> {
        std::str::from_utf8(self.field()?).map_err(|_| Malformed::NotText)
    }

    fn delivery(&mut self) -> Result<(&'a str, u128), Malformed> {
        let queue = self.text()?;
        let id = u128::from_le_bytes(self.take(16)?.try_into().expect("sixteen bytes"));
        Ok((queue, id))
    }

    /// The next change, or `None` at the end.
    pub(super) fn next_change(&mut self) -> Result<Option<Change<'a>>, Malformed> {
        let Some((&tag, rest)) = self.rest.split_first() else {
            return Ok(None);
        };
        self.rest = rest;
        let change = match tag {
            RECORD_PUT => Change::RecordPut {
                key: self.text()?,
                value: self.field()?,
            },
            RECORD_DELETE => Change::RecordDelete { key: self.text()? },
            LIVE_PUT | DEAD_PUT => {
                let (queue, id) = self.delivery()?;
                let value = self.field()?;
                match tag {
                    LIVE_PUT => Change::LivePut { queue, id, value },
                    _ => Change::DeadPut { queue, id, value },
                }
            }
            LIVE_DELETE => {
                let (queue, id) = self.delivery()?;
                Change::LiveDelete { queue, id }
            }
            DEAD_DELETE => {
                let (queue, id) = self.delivery()?;
                Change::DeadDelete { queue, id }
            }
            _ => return Err(Malformed::UnknownKind),
        };
        Ok(Some(change))
    }
}

/// The length of the change at the start of `bytes`, once enough of it is there to tell: its
/// tag, and the length of each field before the last.
pub(super) fn length_of(bytes: &[u8]) -> Option<usize> {
    let field_at = |at: usize| -> Option<usize> {
        let raw = bytes.get(at..at + 4)?;
        Some(u32::from_le_bytes(raw.try_into().ok()?) as usize)
    };
    match *bytes.first()? {
        RECORD_PUT => {
            let key = field_at(1)?;
            Some(1 + 4 + key + 4 + field_at(1 + 4 + key)?)
        }
        LIVE_PUT | DEAD_PUT => {
            let queue = field_at(1)?;
            Some(1 + 4 + queue + 16 + 4 + field_at(1 + 4 + queue + 16)?)
        }
        // Deletes are never read at their place.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::journal::Journal;
    use super::*;

    #[test]
    fn changes_read_back_as_written_and_know_their_length() {
        let mut journal = Journal::at(1, 0);
        journal.record_put("key", b"value");
        journal.dead_delete("queue", 7);
        journal.live_put("queue", 8, b"delivery");
        let bytes = journal.as_bytes();
        let mut reader = Reader::new(bytes);
        assert_eq!(
            reader.next_change(),
            Ok(Some(Change::RecordPut {
                key: "key",
                value: b"value"
            }))
        );
        assert_eq!(length_of(bytes), Some(bytes.len() - reader.left()));
        let dead = Change::DeadDelete {
            queue: "queue",
            id: 7,
        };
        assert_eq!(reader.next_change(), Ok(Some(dead)));
        let live_at = bytes.len() - reader.left();
        assert_eq!(length_of(&bytes[live_at..]), Some(reader.left()));
        assert!(matches!(
            reader.next_change(),
            Ok(Some(Change::LivePut { id: 8, .. }))
        ));
        assert_eq!(reader.next_change(), Ok(None));
    }

    #[test]
    fn a_cut_or_unknown_change_is_an_error() {
        let mut journal = Journal::at(1, 0);
        journal.record_put("key", b"value");
        let bytes = journal.as_bytes();
        let mut cut = Reader::new(&bytes[..bytes.len() - 1]);
        assert_eq!(cut.next_change(), Err(Malformed::Short));
        assert_eq!(
            Reader::new(&[99, 0]).next_change(),
            Err(Malformed::UnknownKind)
        );
    }
}
