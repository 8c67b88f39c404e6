//! What the writer thread does between batches to keep the log's size in hand, and at close.
//!
//! - A full head segment is synced and a new one started (`roll`, before the next batch).
//! - The oldest segment, once little of it is current (`space.rs`), is handed to the retirer
//!   thread; its puts come back as messages applied in a batch like any operation, and once the
//!   entry that moved them on is synced, the segment is deleted.
//! - Expired reservations are forgotten from memory now and then, and a head whose records
//!   have all expired is let go once nothing was written for a while (so that a run of deletes
//!   does not start a segment per batch): it is then retired like any segment, and a store
//!   left idle past its records' ttl shrinks to an empty head.
//! - At close, the head is synced and the store file marked closed cleanly.

use std::time::Instant;

use redb::Database;

use super::meta::{Meta, META};
use super::retire::Chunk;
use super::writer::{WriterThread, PURGE_INTERVAL};
use idempotency_core::backend::now_millis;

/// A segment being retired: its puts are coming from the retirer until the last has been
/// applied, then it waits for the entry that moved them on to be synced.
#[derive(Debug, Clone, Copy)]
pub(super) struct Retiring {
    pub(super) segment: u32,
    pub(super) synced_by: Option<u64>,
}

impl WriterThread {
    /// Notes the end of a segment's puts: it goes once the entry that moved them on is synced.
    pub(super) fn chunks_applied(&mut self, chunks: &[Chunk]) {
        for chunk in chunks.iter().filter(|chunk| chunk.last) {
            if chunk.unreadable {
                self.unreadable = Some(chunk.segment);
                self.retiring = None;
                continue;
            }
            self.retiring = Some(Retiring {
                segment: chunk.segment,
                synced_by: Some(self.last_seq),
            });
        }
    }

    /// Syncs the head segment and starts the next.
    pub(super) fn roll(&mut self) -> std::io::Result<()> {
        self.log.roll()?;
        self.state.space.add_segment(self.log.head());
        self.durability.rolled(self.last_seq, self.log.head_file());
        Ok(())
    }

    /// Between batches, and when idle.
    pub(super) fn housekeep(&mut self) {
        if self.durability.failure().is_some() {
            return;
        }
        let now = now_millis();
        self.delete_retired();
        if self.forgot.elapsed() >= PURGE_INTERVAL {
            self.state.records.forget_expired(now);
            self.forgot = Instant::now();
        }
        if let Err(e) = self.let_spent_head_go(now) {
            let why = format!("starting a new log segment failed: {e}");
            return self.durability.fail(&why);
        }
        if self.retiring.is_none() {
            self.start_retirement(now);
        }
    }

    /// Deletes the segment being retired once what moved on from it is synced.
    fn delete_retired(&mut self) {
        let Some(Retiring {
            segment,
            synced_by: Some(seq),
        }) = self.retiring
        else {
            return;
        };
        if self.durability.synced() < seq {
            return;
        }
        self.retiring = None;
        match self.log.remove(segment) {
            Ok(()) => self.state.space.forget(segment),
            Err(e) => {
                tracing::error!(segment, error = %e, "file store: cannot delete a retired segment; it is kept, and the log grows behind it");
                self.unreadable = Some(segment);
            }
        }
    }

    fn let_spent_head_go(&mut self, now: u64) -> std::io::Result<()> {
        let idle = self.appended.elapsed() >= PURGE_INTERVAL;
        let head = self.log.head();
        if idle && !self.log.head_is_empty() && self.state.space.spent(head, now) {
            self.roll()?;
        }
        Ok(())
    }

    fn start_retirement(&mut self, now: u64) {
        let oldest = self.state.space.retirable(self.log.head(), now);
        let Some(segment) = oldest.filter(|oldest| Some(*oldest) != self.unreadable) else {
            return;
        };
        self.retiring = Some(Retiring {
            segment,
            synced_by: None,
        });
        if let Some(retirer) = &self.retirer {
            retirer.retire(segment);
        }
    }

    /// The head synced, the store file marked closed cleanly.
    pub(super) fn close(mut self) {
        drop(self.retirer.take());
        let clean = self.durability.failure().is_none() && self.log.head_file().sync_data().is_ok();
        if clean {
            self.durability.reached(self.last_seq);
            self.delete_retired();
            let meta = Meta {
                clean: true,
                ..self.meta.clone()
            };
            if let Err(e) = write_meta(&self.db, &meta) {
                tracing::warn!(error = %e, "file store: could not mark the store closed cleanly; the next start reads it as after a crash");
            }
        }
        drop(self.syncer.take());
    }
}

/// Writes the store file's `meta` table with a durable commit.
pub(super) fn write_meta(db: &Database, meta: &Meta) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    meta.write(&mut txn.open_table(META)?)?;
    txn.commit()?;
    Ok(())
}
