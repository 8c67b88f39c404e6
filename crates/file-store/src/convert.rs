//! A store file of the previous releases, converted at open: its records and inbox queues,
//! kept in redb tables, and the entries of its write-ahead log (`PATH-wal`) past its last
//! checkpoint, written into a log of segments (`PATH-log`); then, in one durable commit, the
//! tables are dropped and the file says it is of this layout.
//!
//! A crash before that commit leaves the old file as it was, and the next start converts it
//! again from the start (the log folder is emptied first); after it, the file is of this layout
//! and its log is whole. The write-ahead log is deleted last, and any left behind by a crash is
//! deleted at the next start.
//!
//! The previous release (layout 1) kept the tables up to a checkpoint and the changes since in
//! its write-ahead log, whose entries are this release's entries; the release before it (no
//! `meta` table) synced every write and kept no log. The wait after a machine crash is worked
//! out as the previous release would have: its file closed without a clean close, on another
//! boot, waits a lease from its last entry.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::journal::Journal;
use super::log::{self, Log};
use super::meta::Meta;
use super::open_error::OpenError;
use super::options::FileStoreOptions;
use super::segment::{self, HeaderError, HEADER_LEN, WAL_MAGIC};
use idempotency_core::backend::now_millis;
use idempotency_core::BoxError;

pub(super) const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
const EXPIRIES: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiries");
const INBOX: TableDefinition<(&str, u128), &[u8]> = TableDefinition::new("inbox");
const INBOX_DUE: TableDefinition<(&str, u64, u128), ()> = TableDefinition::new("inbox_due");
const INBOX_DEAD: TableDefinition<(&str, u128), &[u8]> = TableDefinition::new("inbox_dead");

/// Changes per entry while converting: a batch of the writer is far smaller.
const ENTRY_BYTES: usize = 1 << 20;

/// What a conversion carried over, for its log line, and the file's `meta` after it.
pub(super) struct Converted {
    pub(super) meta: Meta,
    pub(super) records: u64,
    pub(super) deliveries: u64,
    pub(super) replayed: u64,
}

/// Writes entries of up to `ENTRY_BYTES` into a fresh log.
struct Writing {
    log: Log,
    journal: Journal,
    seq: u64,
    now: u64,
}

impl Writing {
    fn flush(&mut self) -> std::io::Result<()> {
        let journal = std::mem::replace(&mut self.journal, Journal::at(0, 0));
        match journal.is_empty() {
            true => Ok(()),
            false => self.append(journal.as_bytes(), self.now),
        }
    }

    fn append(&mut self, payload: &[u8], written_at: u64) -> std::io::Result<()> {
        if self.log.head_is_full() {
            self.log.roll()?;
        }
        self.seq += 1;
        self.log.append(self.seq, written_at, payload)
    }

    fn full(&mut self) -> std::io::Result<()> {
        match self.journal.as_bytes().len() >= ENTRY_BYTES {
            true => self.flush(),
            false => Ok(()),
        }
    }
}

/// Converts the previous release's file `db` at `path`; its log goes to `dir`.
pub(super) fn convert(
    path: &Path,
    db: &Database,
    dir: &Path,
    options: &FileStoreOptions,
) -> Result<Converted, OpenError> {
    let shown = || dir.display().to_string();
    let failed = |e: BoxError| OpenError::because("converting the previous release's store", e);
    let old = read_old_meta(db).map_err(|e| failed(e.into()))?;
    empty_dir(dir).map_err(|e| OpenError::because(shown(), e))?;
    let log =
        Log::start(dir, 1, options.segment_limit()).map_err(|e| OpenError::because(shown(), e))?;
    let mut writing = Writing {
        log,
        journal: Journal::at(0, 0),
        seq: 0,
        now: now_millis(),
    };
    let (records, deliveries) = copy_tables(db, &mut writing).map_err(|e| failed(e.into()))?;
    let wal = log::wal_of(path);
    let (replayed, last_entry_at) = copy_wal(&wal, old.applied, &mut writing)?;
    writing.flush().map_err(|e| failed(e.into()))?;
    writing
        .log
        .head_file()
        .sync_data()
        .map_err(|e| failed(e.into()))?;
    log::sync_dir(dir).map_err(|e| failed(e.into()))?;
    let meta = meta_after(&old, last_entry_at, options);
    drop_tables(db, &meta).map_err(|e| failed(e.into()))?;
    if let Err(e) = std::fs::remove_file(&wal) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(wal = %wal.display(), error = %e, "file store: the previous release's write-ahead log is converted but could not be deleted");
        }
    }
    Ok(Converted {
        meta,
        records,
        deliveries,
        replayed,
    })
}

fn read_old_meta(db: &Database) -> Result<Meta, redb::Error> {
    let txn = db.begin_read()?;
    match txn.open_table(super::meta::META) {
        Ok(table) => Ok(Meta::read(&table)?),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(Meta {
            clean: true,
            ..Meta::default()
        }),
        Err(e) => Err(e.into()),
    }
}

/// Removes segments a conversion cut short left behind.
fn empty_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if log::segment_number(&entry.file_name().to_string_lossy()).is_some() {
            std::fs::remove_file(entry.path())?;
        }
    }
    log::sync_dir(dir)
}

/// Writes every live record and every delivery of the tables; how many of each.
fn copy_tables(db: &Database, writing: &mut Writing) -> Result<(u64, u64), redb::Error> {
    let txn = db.begin_read()?;
    let now = writing.now;
    let mut records = 0;
    for entry in txn.open_table(RECORDS)?.iter()? {
        let (key, value) = entry?;
        if super::values::expiry(value.value()) > now {
            writing.journal.record_put(key.value(), value.value());
            records += 1;
            writing.full()?;
        }
    }
    let mut deliveries = 0;
    for (table, dead) in [(INBOX, false), (INBOX_DEAD, true)] {
        let table = match txn.open_table(table) {
            Err(redb::TableError::TableDoesNotExist(_)) => continue,
            opened => opened?,
        };
        for entry in table.iter()? {
            let (key, value) = entry?;
            let (queue, id) = key.value();
            match dead {
                false => writing.journal.live_put(queue, id, value.value()),
                true => writing.journal.dead_put(queue, id, value.value()),
            };
            deliveries += 1;
            writing.full()?;
        }
    }
    Ok((records, deliveries))
}

/// Writes the entries of the old write-ahead log past `applied`, as they are; how many, and
/// when the last was written.
fn copy_wal(wal: &Path, applied: u64, writing: &mut Writing) -> Result<(u64, u64), OpenError> {
    let shown = wal.display();
    let bytes = match std::fs::read(wal) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(OpenError::because(shown.to_string(), e)),
    };
    segment::check_header(&bytes, WAL_MAGIC).map_err(|e| match e {
        HeaderError::Foreign => OpenError::because(format!("{shown}: the write-ahead log"), e),
        HeaderError::Later(_) => OpenError::because(shown.to_string(), e),
    })?;
    let failed = |e: std::io::Error| OpenError::because(format!("converting {shown}"), e);
    writing.flush().map_err(failed)?;
    let (mut replayed, mut last_at) = (0, 0);
    // Entries the tables already hold, behind the last checkpoint, are passed over.
    let run = segment::run_from(&bytes, HEADER_LEN, None);
    for entry in run.entries.iter().filter(|entry| entry.seq > applied) {
        writing
            .append(entry.payload(&bytes), entry.written_at)
            .map_err(failed)?;
        replayed += 1;
        last_at = entry.written_at;
    }
    Ok((replayed, last_at))
}

/// The file's state after the conversion, with the wait the previous release would have kept.
fn meta_after(old: &Meta, last_entry_at: u64, options: &FileStoreOptions) -> Meta {
    let boot = options.current_boot();
    let unclean = old.layout.is_some() && !old.clean;
    let machine_crash = unclean && !(boot.is_some() && old.boot == boot);
    let guard_from = match machine_crash {
        true => old.guard_from.max(old.last_entry_at).max(last_entry_at),
        false => old.guard_from,
    };
    Meta {
        boot,
        clean: true,
        guard_from,
        ..Meta::default()
    }
}

/// Drops the old tables and writes the new `meta`, in one durable commit.
fn drop_tables(db: &Database, meta: &Meta) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    txn.delete_table(RECORDS)?;
    txn.delete_table(EXPIRIES)?;
    txn.delete_table(INBOX)?;
    txn.delete_table(INBOX_DUE)?;
    txn.delete_table(INBOX_DEAD)?;
    meta.write(&mut txn.open_table(super::meta::META)?)?;
    txn.commit()?;
    Ok(())
}
