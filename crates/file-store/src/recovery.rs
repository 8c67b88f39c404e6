//! Opening the store: the file as its last durable commit left it, the log's entries replayed
//! on top, and the wait that a machine crash calls for.
//!
//! In one durable transaction: every table is created if missing; the entries of the log past
//! the file's `applied` are replayed in order (a torn or corrupt tail was already cut by the
//! scan at the last whole entry); the start is recorded (this boot, not closed cleanly). Only
//! then is the log started afresh, so a crash at any point of opening leaves a file and a log
//! that open again to the same state.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, TableHandle, WriteTransaction};

use super::guard::{FileStoreOptions, Guard};
use super::meta::{Meta, LAYOUT, META};
use super::queue::QueueTables;
use super::replay;
use super::syncer::Durability;
use super::tables::{Tables, RECORDS};
use super::wal::{self, LogFile, Scan};
use super::writer::Start;
use idempotency_core::model::now_millis;

/// Opens the log beside the open store file `db` at `path`, brings the file up to date from
/// it, and returns what the writer starts from; the error is a sentence for the operator.
pub(super) fn recover(
    path: &Path,
    db: Arc<Database>,
    options: &FileStoreOptions,
) -> Result<Start, String> {
    let log_path = wal::log_path(path);
    let shown = log_path.display();
    let scan = wal::scan(&log_path).map_err(|e| format!("{shown}: {e}"))?;
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    let previous_release = written_by_previous_release(&txn)?;
    let boot = options.current_boot();
    let (meta, replayed) = bring_up_to_date(&txn, &scan.unwrap_or_default(), boot.clone())
        .map_err(|e| format!("{shown}: {e}"))?;
    txn.commit().map_err(|e| e.to_string())?;
    let log = LogFile::start(&log_path).map_err(|e| format!("{shown}: cannot write: {e}"))?;
    report(path, previous_release, replayed, &meta);
    Ok(Start {
        durability: Arc::new(Durability::new(meta.applied)),
        guard: Guard {
            from: meta.guard_from,
        },
        db,
        log,
        log_path,
        meta,
    })
}

/// A file with the record tables and no `meta` table: the release before synced every write
/// and kept no log, so it is opened as it is and counts as closed cleanly.
fn written_by_previous_release(txn: &WriteTransaction) -> Result<bool, String> {
    let tables: Vec<String> = txn
        .list_tables()
        .map_err(|e| e.to_string())?
        .map(|table| table.name().to_owned())
        .collect();
    let has = |name: &str| tables.iter().any(|table| table == name);
    Ok(has(RECORDS.name()) && !has(META.name()))
}

/// How many entries were replayed, and how many bytes after them were dropped.
#[derive(Clone, Copy)]
struct Replayed {
    entries: usize,
    cut: u64,
    machine_crash: bool,
}

fn bring_up_to_date(
    txn: &WriteTransaction,
    scan: &Scan,
    boot: Option<String>,
) -> Result<(Meta, Replayed), String> {
    let failed = |e: &dyn std::fmt::Display| e.to_string();
    let mut meta_table = txn.open_table(META).map_err(|e| failed(&e))?;
    let mut meta = Meta::read(&meta_table).map_err(|e| failed(&e))?;
    let unclean = meta.layout.is_some() && !meta.clean;
    let entries = replay_after(txn, scan, &mut meta)?;
    // The machine restarted since the store was opened, and it was not closed: the
    // reservations of the last moments before the crash may be lost with the log's tail.
    let machine_crash = unclean && !(boot.is_some() && meta.boot == boot);
    if machine_crash {
        meta.guard_from = meta.guard_from.max(meta.last_entry_at);
    }
    meta.layout = Some(LAYOUT);
    meta.boot = boot;
    meta.clean = false;
    meta.write(&mut meta_table).map_err(|e| failed(&e))?;
    let replayed = Replayed {
        entries,
        cut: scan.cut,
        machine_crash,
    };
    Ok((meta, replayed))
}

/// Replays the entries of `scan` past `meta.applied`, moving it on; returns how many.
fn replay_after(txn: &WriteTransaction, scan: &Scan, meta: &mut Meta) -> Result<usize, String> {
    let failed = |e: &dyn std::fmt::Display| e.to_string();
    let mut tables = Tables::open(txn).map_err(|e| failed(&e))?;
    let mut queues = QueueTables::open(txn).map_err(|e| failed(&e))?;
    let durable = meta.applied;
    let mut replayed = 0;
    for entry in scan.entries.iter().filter(|entry| entry.seq > durable) {
        if entry.seq != meta.applied + 1 {
            return Err(format!(
                "the log goes on from entry {} but the store file ends at entry {}; move the log \
                 aside to open the store without the writes it holds",
                entry.seq, meta.applied
            ));
        }
        replay::replay(&entry.payload, &mut tables, &mut queues).map_err(|e| failed(&e))?;
        meta.applied = entry.seq;
        meta.last_entry_at = meta.last_entry_at.max(entry.written_at);
        replayed += 1;
    }
    Ok(replayed)
}

/// The start's one log line, when there is something to say.
fn report(path: &Path, previous_release: bool, replayed: Replayed, meta: &Meta) {
    let path = path.display();
    if previous_release {
        tracing::info!(%path, "file store written by the previous release: opened as it is; writes now go through a write-ahead log beside it");
    }
    if replayed.machine_crash {
        let since = now_millis().saturating_sub(meta.last_entry_at) / 1000;
        tracing::warn!(%path, last_write_seconds_ago = since, replayed = replayed.entries, "file store was not closed and the machine has restarted since: reservations made just before may be lost, so keys without a record are refused (503) until their route's lease has passed since the last write");
    } else if replayed.entries > 0 || replayed.cut > 0 {
        tracing::info!(%path, replayed = replayed.entries, bytes_after_last_entry = replayed.cut, "file store was not closed: its write-ahead log was replayed");
    }
}
