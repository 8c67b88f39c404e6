//! One segment of the log: its file's layout, an entry as it is written, and reading a
//! segment's entries back.
//!
//! Layout: a 16-byte header (`MAGIC`, the format version and four reserved bytes, little
//! endian), then entries, each `[payload length u32][CRC-32C u32][sequence u64][written at,
//! unix ms u64][payload]`. The checksum covers the length, the sequence, the time and the
//! payload. Sequence numbers rise by one from entry to entry, and on from one segment to the
//! next; a segment's first entry is only asked to come later than the one before it, since a
//! segment of damaged bytes may have lost its last entries. A payload is the changes of one
//! batch (`journal.rs`).
//!
//! The previous release's write-ahead log (`PATH-wal`) has the same entries behind another
//! header, so the same reader takes its entries when that release's file is converted.

use super::checksum::Crc32c;

pub(super) const MAGIC: [u8; 8] = *b"IPXLOG\r\n";
/// The previous release's write-ahead log.
pub(super) const WAL_MAGIC: [u8; 8] = *b"IPXWAL\r\n";
/// The layout this release writes and reads; a segment of a later one is refused.
pub(super) const FORMAT_VERSION: u32 = 2;
pub(super) const HEADER_LEN: u64 = 16;
pub(super) const ENTRY_HEADER: u64 = 24;

/// A segment's header.
pub(super) fn header() -> [u8; HEADER_LEN as usize] {
    let mut header = [0; HEADER_LEN as usize];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header
}

/// Encodes one entry into `out` (cleared first).
pub(super) fn encode_entry(out: &mut Vec<u8>, seq: u64, written_at: u64, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("an entry's payload is checked below 4 GiB");
    out.clear();
    out.reserve(ENTRY_HEADER as usize + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&written_at.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = checksum(out);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// The checksum of an encoded entry: everything but the checksum's own four bytes.
fn checksum(entry: &[u8]) -> u32 {
    Crc32c::new()
        .update(&entry[..4])
        .update(&entry[8..])
        .finish()
}

/// Why a file cannot be read as a segment at all (as opposed to damage after its header).
#[derive(Debug, thiserror::Error)]
pub(super) enum HeaderError {
    #[error("does not start with this store's header (if it is not this store's, move it away); refusing to touch it")]
    Foreign,
    #[error("is of format {0}, written by a later release; run that release")]
    Later(u32),
}

/// Checks a file's header against `magic`; a header cut short is an empty file (a crash right
/// after its creation), whose entries start at `HEADER_LEN` as ever.
pub(super) fn check_header(bytes: &[u8], magic: [u8; 8]) -> Result<(), HeaderError> {
    let Some(header) = bytes.get(..HEADER_LEN as usize) else {
        return Ok(());
    };
    if header[..8] != magic {
        return Err(HeaderError::Foreign);
    }
    let version = u32::from_le_bytes(header[8..12].try_into().expect("four bytes"));
    match magic == MAGIC && version > FORMAT_VERSION {
        true => Err(HeaderError::Later(version)),
        false => Ok(()),
    }
}

/// One whole, intact entry of a file read whole: where it starts, and its payload's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) offset: u64,
    pub(super) seq: u64,
    pub(super) written_at: u64,
    pub(super) payload_len: u64,
}

impl Entry {
    pub(super) fn payload_at(&self) -> u64 {
        self.offset + ENTRY_HEADER
    }

    pub(super) fn end(&self) -> u64 {
        self.payload_at() + self.payload_len
    }

    pub(super) fn payload<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        &file[self.payload_at() as usize..self.end() as usize]
    }
}

/// The entry at `offset` of `file` if it is whole and intact.
pub(super) fn entry_at(file: &[u8], offset: u64) -> Option<Entry> {
    let at = usize::try_from(offset).ok()?;
    let header = file.get(at..at.checked_add(ENTRY_HEADER as usize)?)?;
    let field = |from: usize| u64::from_le_bytes(header[from..from + 8].try_into().expect("eight"));
    let len = u32::from_le_bytes(header[..4].try_into().expect("four bytes"));
    let whole = file.get(at..(at + ENTRY_HEADER as usize).checked_add(len as usize)?)?;
    let stored = u32::from_le_bytes(header[4..8].try_into().expect("four bytes"));
    (checksum(whole) == stored).then_some(Entry {
        offset,
        seq: field(8),
        written_at: field(16),
        payload_len: u64::from(len),
    })
}

/// What reading a segment found: its run of whole, intact entries in sequence, and where that
/// run ended if bytes that are not such an entry follow it.
#[derive(Debug, Default)]
pub(super) struct Run {
    pub(super) entries: Vec<Entry>,
    pub(super) broken_at: Option<u64>,
}

/// The entries of `file` from `from` on: the first later in sequence than `after` (any, when
/// it is `None`), each next one the one after it, up to the first that is not.
pub(super) fn run_from(file: &[u8], from: u64, after: Option<u64>) -> Run {
    let mut run = Run::default();
    let mut at = from;
    while (at as usize) < file.len() {
        let follows = |entry: &Entry| match run.entries.last() {
            Some(last) => entry.seq == last.seq + 1,
            None => after.is_none_or(|after| entry.seq > after),
        };
        let Some(entry) = entry_at(file, at).filter(follows) else {
            run.broken_at = Some(at);
            break;
        };
        at = entry.end();
        run.entries.push(entry);
    }
    run
}

/// How far ahead of the last good entry a later one is looked for past damage.
const RESYNC_SEQUENCE_WINDOW: u64 = 1 << 24;

/// From damage at `from` on, the first offset where an intact entry later in sequence than
/// `last` starts: the sequence window and the checksum keep stray bytes from passing for one.
pub(super) fn resync(file: &[u8], from: u64, last: u64) -> Option<u64> {
    let later = |seq: u64| seq > last && seq - last <= RESYNC_SEQUENCE_WINDOW;
    (from..file.len() as u64).find(|&at| {
        let seq = file
            .get(at as usize + 8..at as usize + 16)
            .map(|raw| u64::from_le_bytes(raw.try_into().expect("eight")));
        seq.is_some_and(later) && entry_at(file, at).is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(entries: &[(u64, &[u8])]) -> Vec<u8> {
        let mut file = header().to_vec();
        let mut entry = Vec::new();
        for (seq, payload) in entries {
            encode_entry(&mut entry, *seq, 1000 + seq, payload);
            file.extend_from_slice(&entry);
        }
        file
    }

    #[test]
    fn entries_read_back_in_sequence_and_stop_at_a_gap() {
        let file = file_of(&[(4, b"a"), (5, b"bb"), (7, b"ccc")]);
        let run = run_from(&file, HEADER_LEN, None);
        let seqs: Vec<u64> = run.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [4, 5]);
        assert_eq!(
            run_from(&file, HEADER_LEN, Some(4)).broken_at,
            Some(HEADER_LEN)
        );
        assert_eq!(run_from(&file, HEADER_LEN, Some(2)).entries.len(), 2);
        assert_eq!(run.entries[1].payload(&file), b"bb");
        assert_eq!(run.broken_at, Some(run.entries[1].end()));
        assert_eq!(resync(&file, run.entries[1].end(), 5), run.broken_at);
    }

    #[test]
    fn a_flipped_byte_breaks_its_entry_and_resync_finds_the_next() {
        let mut file = file_of(&[(1, b"first"), (2, b"second"), (3, b"third")]);
        let second = entry_at(&file, HEADER_LEN).unwrap().end();
        file[second as usize + 26] ^= 1;
        let run = run_from(&file, HEADER_LEN, None);
        assert_eq!(run.entries.len(), 1);
        assert_eq!(run.broken_at, Some(second));
        let third = resync(&file, second, 1).unwrap();
        assert_eq!(entry_at(&file, third).unwrap().seq, 3);
    }

    #[test]
    fn a_header_cut_short_is_an_empty_segment_and_a_foreign_one_is_refused() {
        assert!(check_header(&MAGIC[..5], MAGIC).is_ok());
        assert!(matches!(
            check_header(b"not a segment at all", MAGIC),
            Err(HeaderError::Foreign)
        ));
        let mut later = header();
        later[8..12].copy_from_slice(&9u32.to_le_bytes());
        assert!(matches!(
            check_header(&later, MAGIC),
            Err(HeaderError::Later(9))
        ));
    }
}
