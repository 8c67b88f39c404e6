//! Opening the store: the store file's `meta` (converting a file of the previous release
//! first), the log read from its oldest segment to its newest into memory, and the wait that a
//! machine crash calls for.
//!
//! Only the last segment can end in a torn entry (`log.rs`): it is cut at its last whole entry,
//! the bytes after are dropped from the file, and what is left is synced (a process killed on
//! this boot left it written, not synced) before anything new is written or read. Damage in
//! another segment is damage to bytes that were on the disk: the entries it broke are lost
//! (and said so, loudly), the reading goes on at the next intact entry. Then the start is
//! recorded (this boot, not closed cleanly) with a durable commit, and a new head segment is
//! started, so a crash at any point of opening leaves a store that opens again to the same state.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use redb::{Database, ReadableDatabase, TableHandle};

use super::convert;
use super::guard::Guard;
use super::housekeeping::write_meta;
use super::log::{self, Log};
use super::meta::{Meta, LAYOUT, META};
use super::open_error::OpenError;
use super::options::FileStoreOptions;
use super::segment::{self, HEADER_LEN, MAGIC};
use super::state::State;
use super::syncer::Durability;
use super::writer::Start;
use idempotency_core::backend::now_millis;
use idempotency_core::BoxError;

/// What reading the log found.
#[derive(Default)]
struct Read {
    segments: Vec<u32>,
    last_seq: u64,
    last_written_at: u64,
    /// The last segment's bytes after its last whole entry, dropped.
    cut: u64,
}

/// Opens the log beside the open store file `db` at `path`, reads it into memory, and returns
/// what the writer starts from; the error is a sentence for the operator.
pub(super) fn open(
    path: &Path,
    mut db: Database,
    options: &FileStoreOptions,
) -> Result<Start, OpenError> {
    let began = Instant::now();
    let dir = log::dir_of(path);
    let shown = dir.display();
    let mut meta = read_meta(&db)?;
    if meta.layout.is_some_and(|layout| layout > LAYOUT) {
        return Err(OpenError::new(format!(
            "the store file is of layout {}, written by a later release; run that release",
            meta.layout.unwrap_or_default()
        )));
    }
    if meta.layout == Some(LAYOUT) && !dir.is_dir() {
        return Err(OpenError::new(format!("its log folder {shown} is missing: restore it (a copy of the store is the file and the folder together), or move the store file away to start an empty store")));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| OpenError::because(format!("{shown}: cannot create the log folder"), e))?;
    let converted = match meta.layout != Some(LAYOUT) && has_records(&db)? {
        true => Some(convert::convert(path, &db, &dir, options)?),
        false => None,
    };
    if let Some(converted) = &converted {
        meta = converted.meta.clone();
        // The tables' pages are free now: give them back to the file system.
        let _ = db.compact();
    }
    let mut state = State::new();
    let read = read_log(&dir, &mut state)?;
    let boot = options.current_boot();
    let same_boot = boot.is_some() && meta.boot == boot;
    let machine_crash = !meta.clean && !same_boot;
    if machine_crash {
        let lost_from = read.last_written_at.max(meta.opened_at);
        meta.guard_from = meta.guard_from.max(lost_from);
    }
    meta = Meta {
        layout: Some(LAYOUT),
        boot,
        clean: false,
        opened_at: now_millis(),
        ..meta
    };
    write_meta(&db, &meta)
        .map_err(|e| OpenError::because("cannot record the start in the store file", e))?;
    let head = read.segments.last().map_or(1, |last| last + 1);
    let log = Log::start(&dir, head, options.segment_limit())
        .map_err(|e| OpenError::because(format!("{shown}: cannot start a log segment"), e))?;
    state.space.add_segment(head);
    remove_previous_log(path);
    report(
        path,
        &read,
        &state,
        machine_crash,
        &meta,
        converted.as_ref(),
        began,
    );
    Ok(Start {
        durability: Arc::new(Durability::new(read.last_seq, log.head_file())),
        guard: Guard {
            from: meta.guard_from,
        },
        db,
        meta,
        log,
        state,
        last_seq: read.last_seq,
    })
}

/// Refuses a log folder whose store file is gone: the file says how the store was closed, and
/// without it a start could neither tell a machine crash nor that the folder is this store's.
pub(super) fn refuse_half_a_store(path: &Path) -> Result<(), OpenError> {
    let dir = log::dir_of(path);
    if path.exists() || !dir.is_dir() || segments(&dir)?.is_empty() {
        return Ok(());
    }
    Err(OpenError::new(format!(
        "the store file is missing but its log folder {} holds a log: restore the file (a copy of the store is the file and the folder together), or move the folder away to start an empty store",
        dir.display()
    )))
}

fn read_meta(db: &Database) -> Result<Meta, OpenError> {
    let failed = |e: BoxError| OpenError::because("cannot read the store file", e);
    let txn = db.begin_read().map_err(|e| failed(e.into()))?;
    match txn.open_table(META) {
        Ok(table) => Meta::read(&table).map_err(|e| failed(e.into())),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(Meta::default()),
        Err(e) => Err(failed(e.into())),
    }
}

/// Whether the file holds a records table: one written by a release before this one.
fn has_records(db: &Database) -> Result<bool, OpenError> {
    let failed = |e: BoxError| OpenError::because("cannot read the store file's tables", e);
    let txn = db.begin_read().map_err(|e| failed(e.into()))?;
    let tables = txn.list_tables().map_err(|e| failed(e.into()))?;
    let names: Vec<String> = tables.map(|table| table.name().to_owned()).collect();
    Ok(names.iter().any(|name| name == convert::RECORDS.name()))
}

/// The log's segments, oldest first.
pub(super) fn segments(dir: &Path) -> Result<Vec<u32>, OpenError> {
    let listed =
        std::fs::read_dir(dir).map_err(|e| OpenError::because(dir.display().to_string(), e))?;
    let mut numbers: Vec<u32> = listed
        .filter_map(Result::ok)
        .filter_map(|entry| log::segment_number(&entry.file_name().to_string_lossy()))
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// Reads every segment in order into `state`; cuts the last one at its last whole entry.
fn read_log(dir: &Path, state: &mut State) -> Result<Read, OpenError> {
    let mut read = Read {
        segments: segments(dir)?,
        ..Read::default()
    };
    let mut last: Option<u64> = None;
    for (n, &number) in read.segments.iter().enumerate() {
        let path = log::segment_path(dir, number);
        let shown = || path.display().to_string();
        let bytes = std::fs::read(&path).map_err(|e| OpenError::because(shown(), e))?;
        segment::check_header(&bytes, MAGIC).map_err(|e| OpenError::because(shown(), e))?;
        let is_last = n + 1 == read.segments.len();
        state.space.add_segment(number);
        let mut from = HEADER_LEN;
        loop {
            let run = segment::run_from(&bytes, from, last);
            for entry in &run.entries {
                state
                    .replay(number, entry.payload_at(), entry.payload(&bytes))
                    .map_err(|e| {
                        OpenError::because(format!("{}: entry {}", shown(), entry.seq), e)
                    })?;
                last = Some(entry.seq);
                read.last_written_at = read.last_written_at.max(entry.written_at);
            }
            let Some(broken) = run.broken_at else {
                if is_last {
                    cut(&path, bytes.len() as u64)?;
                }
                break;
            };
            if is_last {
                read.cut = bytes.len() as u64 - broken;
                cut(&path, broken)?;
                break;
            }
            let next = last.and_then(|last| segment::resync(&bytes, broken, last));
            let lost = next.unwrap_or(bytes.len() as u64) - broken;
            tracing::error!(segment = %path.display(), offset = broken, bytes_lost = lost, "file store: a segment of the log is damaged on the disk; the entries in the damaged bytes are lost, the rest is read");
            match next {
                Some(next) => from = next,
                None => break,
            }
        }
    }
    read.last_seq = last.unwrap_or(0);
    Ok(read)
}

/// Drops the last segment's bytes from `at` on, for good, and syncs what is left: a process
/// killed on this boot left its last entries written, not synced, and they are on the disk
/// before anyone is shown them.
fn cut(path: &Path, at: u64) -> Result<(), OpenError> {
    let failed = |e: std::io::Error| {
        OpenError::because(format!("{}: cannot sync its end", path.display()), e)
    };
    let file = OpenOptions::new().write(true).open(path).map_err(failed)?;
    if file.metadata().map_err(failed)?.len() > at {
        file.set_len(at.max(HEADER_LEN)).map_err(failed)?;
    }
    file.sync_all().map_err(failed)
}

/// The previous release's write-ahead log, once its entries are in the log (a conversion that
/// was cut short before it could delete it).
fn remove_previous_log(path: &Path) {
    let wal: PathBuf = log::wal_of(path);
    if wal.exists() {
        let _ = std::fs::remove_file(&wal);
    }
}

/// The start's log lines.
fn report(
    path: &Path,
    read: &Read,
    state: &State,
    machine_crash: bool,
    meta: &Meta,
    converted: Option<&convert::Converted>,
    began: Instant,
) {
    let path = path.display();
    if let Some(converted) = converted {
        tracing::info!(%path, records = converted.records, deliveries = converted.deliveries, replayed = converted.replayed, "file store written by the previous release: converted to this release's log of segments beside it (PATH-log), and the store file keeps only its state");
    }
    let since = now_millis().saturating_sub(meta.guard_from) / 1000;
    if machine_crash && meta.guard_from > 0 {
        tracing::warn!(%path, last_write_seconds_ago = since, "file store was not closed and the machine has restarted since: reservations made just before may be lost, so keys without a record are refused (503) until their route's lease has passed since the last write");
    } else if read.cut > 0 {
        tracing::info!(%path, bytes_after_last_entry = read.cut, "file store was not closed: the torn end of its log was dropped");
    }
    tracing::info!(%path, records = state.records.len(), segments = read.segments.len(), elapsed_ms = began.elapsed().as_millis() as u64, "file store opened");
}
