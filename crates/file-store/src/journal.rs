//! What a batch changed, as the log keeps it: the puts and deletes it made to records and
//! deliveries, encoded as they happen, each at a place in the log ([`Loc`]) that the in-memory
//! index then points to.
//!
//! Physical changes rather than the operations themselves: an operation's effect depends on the
//! clock and on fresh fencing tokens, a put or delete depends on nothing, so replaying the log
//! gives exactly the state the writer had.
//!
//! A change is a tag byte, then its fields: strings and values as a `u32` length (little
//! endian) and bytes, delivery ids as 16 bytes. The encoding is the previous release's, so its
//! write-ahead log's entries convert as they are. An unknown tag is an error, never skipped: a
//! log written by a later release is refused rather than half applied.

pub(super) const RECORD_PUT: u8 = 1;
pub(super) const RECORD_DELETE: u8 = 2;
pub(super) const LIVE_PUT: u8 = 3;
pub(super) const LIVE_DELETE: u8 = 4;
pub(super) const DEAD_PUT: u8 = 5;
pub(super) const DEAD_DELETE: u8 = 6;

/// Where a change starts in the log: its segment's number and its byte offset in that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Loc(u64);

/// Offsets take the low bits: a segment is far smaller than 64 GiB.
const OFFSET_BITS: u32 = 36;

impl Loc {
    pub(super) fn new(segment: u32, offset: u64) -> Self {
        debug_assert!(offset < 1 << OFFSET_BITS);
        Self((u64::from(segment) << OFFSET_BITS) | offset)
    }

    pub(super) fn segment(self) -> u32 {
        (self.0 >> OFFSET_BITS) as u32
    }

    pub(super) fn offset(self) -> u64 {
        self.0 & ((1 << OFFSET_BITS) - 1)
    }
}

/// The encoded changes of one batch, and where their entry's payload will start.
#[derive(Debug)]
pub(super) struct Journal {
    bytes: Vec<u8>,
    segment: u32,
    payload_at: u64,
}

impl Journal {
    /// A journal whose entry's payload will be written at `payload_at` in `segment`.
    pub(super) fn at(segment: u32, payload_at: u64) -> Self {
        Self {
            bytes: Vec::new(),
            segment,
            payload_at,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes from `loc` on, if `loc` is in this journal: a change not written yet.
    pub(super) fn from(&self, loc: Loc) -> Option<&[u8]> {
        let start = loc.offset().checked_sub(self.payload_at)?;
        (loc.segment() == self.segment)
            .then(|| self.bytes.get(start as usize..))
            .flatten()
    }

    fn next(&mut self, tag: u8) -> Loc {
        let loc = Loc::new(self.segment, self.payload_at + self.bytes.len() as u64);
        self.bytes.push(tag);
        loc
    }

    pub(super) fn record_put(&mut self, key: &str, value: &[u8]) -> Loc {
        let loc = self.next(RECORD_PUT);
        self.field(key.as_bytes());
        self.field(value);
        loc
    }

    pub(super) fn record_delete(&mut self, key: &str) {
        self.next(RECORD_DELETE);
        self.field(key.as_bytes());
    }

    pub(super) fn live_put(&mut self, queue: &str, id: u128, value: &[u8]) -> Loc {
        let loc = self.delivery(LIVE_PUT, queue, id);
        self.field(value);
        loc
    }

    pub(super) fn live_delete(&mut self, queue: &str, id: u128) {
        self.delivery(LIVE_DELETE, queue, id);
    }

    pub(super) fn dead_put(&mut self, queue: &str, id: u128, value: &[u8]) -> Loc {
        let loc = self.delivery(DEAD_PUT, queue, id);
        self.field(value);
        loc
    }

    pub(super) fn dead_delete(&mut self, queue: &str, id: u128) {
        self.delivery(DEAD_DELETE, queue, id);
    }

    fn delivery(&mut self, tag: u8, queue: &str, id: u128) -> Loc {
        let loc = self.next(tag);
        self.field(queue.as_bytes());
        self.bytes.extend_from_slice(&id.to_le_bytes());
        loc
    }

    fn field(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).expect("a stored value is smaller than 4 GiB");
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loc_keeps_its_segment_and_offset() {
        let loc = Loc::new(70_000, (1 << 35) + 17);
        assert_eq!((loc.segment(), loc.offset()), (70_000, (1 << 35) + 17));
        assert!(Loc::new(2, 0) > Loc::new(1, 1 << 30));
    }

    #[test]
    fn each_change_is_found_again_at_its_loc() {
        let mut journal = Journal::at(3, 100);
        let first = journal.record_put("a", b"value");
        journal.record_delete("b");
        let third = journal.live_put("q", 9, b"delivery");
        assert_eq!(first, Loc::new(3, 100));
        assert_eq!(journal.from(first).unwrap()[0], RECORD_PUT);
        assert_eq!(journal.from(third).unwrap()[0], LIVE_PUT);
        assert!(journal.from(Loc::new(2, 100)).is_none());
        assert!(journal.from(Loc::new(3, 99)).is_none());
    }
}
