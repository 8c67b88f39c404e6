//! The log on disk (`PATH-log/`, one file per segment): appending entries to its head segment,
//! moving on to a new segment, reading a change back at its place, and deleting a retired
//! segment.
//!
//! A segment is handed over whole before the next one gets an entry: the roll syncs the head
//! before the new file (header synced, directory synced) takes entries. So only the last segment
//! can end in a torn entry after a crash of the machine, and damage anywhere else is damage to
//! bytes that were on the disk (`recovery.rs` tells the two apart).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::change;
use super::journal::{Journal, Loc};
use super::segment::{self, ENTRY_HEADER, HEADER_LEN};

/// The log folder beside the store file at `store`.
pub(super) fn dir_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-log");
    PathBuf::from(name)
}

/// The previous release's write-ahead log beside the store file at `store`.
pub(super) fn wal_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

pub(super) fn segment_path(dir: &Path, number: u32) -> PathBuf {
    dir.join(format!("{number:010}.seg"))
}

/// The number of a segment file's name, if it is one.
pub(super) fn segment_number(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Syncs a folder, so the files created or deleted in it stay so after a crash.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates segment `number` with its header, synced with its folder entry.
pub(super) fn create_segment(dir: &Path, number: u32) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(segment_path(dir, number))?;
    file.write_all_at(&segment::header(), 0)?;
    file.sync_all()?;
    sync_dir(dir)?;
    Ok(file)
}

/// Handles kept on segments other than the head, for reads: few are read at all.
const READERS: usize = 32;
/// What a read takes at first: most changes are smaller.
const FIRST_READ: usize = 4096;

pub(super) struct Log {
    dir: PathBuf,
    head: u32,
    file: Arc<File>,
    /// Where the next entry goes in the head segment.
    end: u64,
    /// The head is left for a new segment once it is this long.
    limit: u64,
    readers: HashMap<u32, File>,
    entry: Vec<u8>,
}

impl Log {
    /// Starts a new head segment, `head`, in `dir`.
    pub(super) fn start(dir: &Path, head: u32, limit: u64) -> std::io::Result<Self> {
        Ok(Self {
            dir: dir.to_owned(),
            head,
            file: Arc::new(create_segment(dir, head)?),
            end: HEADER_LEN,
            limit,
            readers: HashMap::new(),
            entry: Vec::new(),
        })
    }

    pub(super) fn head(&self) -> u32 {
        self.head
    }

    /// The head segment's file, for the syncer.
    pub(super) fn head_file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// Where the next entry's payload will start in the head segment.
    pub(super) fn payload_at(&self) -> u64 {
        self.end + ENTRY_HEADER
    }

    /// Whether the head has no entry yet.
    pub(super) fn head_is_empty(&self) -> bool {
        self.end == HEADER_LEN
    }

    /// Whether the head is full: the next batch goes to a new segment.
    pub(super) fn head_is_full(&self) -> bool {
        self.end >= self.limit
    }

    /// Hands one entry to the operating system (written, not synced): one `pwrite`.
    pub(super) fn append(
        &mut self,
        seq: u64,
        written_at: u64,
        payload: &[u8],
    ) -> std::io::Result<()> {
        if u32::try_from(payload.len()).is_err() {
            return Err(std::io::Error::other("a log entry is larger than 4 GiB"));
        }
        segment::encode_entry(&mut self.entry, seq, written_at, payload);
        self.file.write_all_at(&self.entry, self.end)?;
        self.end += self.entry.len() as u64;
        // A large entry would otherwise keep its buffer for the life of the store.
        if self.entry.capacity() > 1 << 20 {
            self.entry = Vec::new();
        }
        Ok(())
    }

    /// Syncs the head and starts the next segment; the old head is then on the disk whole.
    pub(super) fn roll(&mut self) -> std::io::Result<()> {
        self.file.sync_data()?;
        let next = self.head + 1;
        let file = create_segment(&self.dir, next)?;
        self.head = next;
        self.file = Arc::new(file);
        self.end = HEADER_LEN;
        Ok(())
    }

    /// The change at `loc`, from `pending` (the batch being built) if it is there.
    pub(super) fn read(&mut self, loc: Loc, pending: &Journal) -> std::io::Result<Vec<u8>> {
        if let Some(bytes) = pending.from(loc) {
            let len = change::length_of(bytes).filter(|len| *len <= bytes.len());
            return len
                .map(|len| bytes[..len].to_vec())
                .ok_or_else(|| corrupt(loc));
        }
        let mut bytes = vec![0; FIRST_READ];
        let read = self.read_at(loc, &mut bytes)?;
        bytes.truncate(read);
        let len = change::length_of(&bytes).ok_or_else(|| corrupt(loc))?;
        if len > bytes.len() {
            let start = bytes.len();
            bytes.resize(len, 0);
            let more = Loc::new(loc.segment(), loc.offset() + start as u64);
            if self.read_at(more, &mut bytes[start..])? < len - start {
                return Err(corrupt(loc));
            }
        }
        bytes.truncate(len);
        Ok(bytes)
    }

    /// Reads as much as there is, up to `buf`'s length, at `loc`.
    fn read_at(&mut self, loc: Loc, buf: &mut [u8]) -> std::io::Result<usize> {
        let file = match loc.segment() == self.head {
            true => &*self.file,
            false => self.reader(loc.segment())?,
        };
        let mut read = 0;
        while read < buf.len() {
            match file.read_at(&mut buf[read..], loc.offset() + read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(read)
    }

    fn reader(&mut self, segment: u32) -> std::io::Result<&File> {
        if !self.readers.contains_key(&segment) {
            if self.readers.len() >= READERS {
                self.readers.clear();
            }
            let file = File::open(segment_path(&self.dir, segment))?;
            self.readers.insert(segment, file);
        }
        Ok(&self.readers[&segment])
    }

    /// Deletes a retired segment for good.
    pub(super) fn remove(&mut self, segment: u32) -> std::io::Result<()> {
        self.readers.remove(&segment);
        match std::fs::remove_file(segment_path(&self.dir, segment)) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        sync_dir(&self.dir)
    }
}

fn corrupt(loc: Loc) -> std::io::Error {
    std::io::Error::new(
        ErrorKind::InvalidData,
        format!(
            "no whole change at byte {} of segment {}",
            loc.offset(),
            loc.segment()
        ),
    )
}
