//! The `meta` table: where the store file says how far it has taken the write-ahead log and how
//! it was last closed.
//!
//! - `layout`: the store layout (1 since the write-ahead log); a file without it was written by
//!   the release before, which synced every write and kept no log.
//! - `applied`: the last log entry whose changes are in the file as of the last checkpoint,
//!   written with it; the entries after it are replayed. redb comes back after a crash as its
//!   last durable commit, which is a checkpoint; and were it ever found further on (a batch
//!   committed without a sync that survived after all), replaying entries it already holds
//!   changes nothing: every change in an entry is a whole put or delete of one key, and the
//!   index tables are kept by the same calls from the value actually there.
//! - `last_entry_at`: when the last entry was written (unix ms), as of the last checkpoint.
//! - `boot`: the machine's boot id when the store was opened; `clean`: whether it was closed.
//! - `guard_from`: when the last entry before a machine crash was written (unix ms), kept so
//!   that a second start within the wait still waits.

use redb::{ReadableTable, StorageError, Table, TableDefinition};

pub(super) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The layout this release writes.
pub(super) const LAYOUT: u64 = 1;

/// The `meta` table's contents.
#[derive(Debug, Default, Clone)]
pub(super) struct Meta {
    pub(super) layout: Option<u64>,
    pub(super) applied: u64,
    pub(super) last_entry_at: u64,
    pub(super) boot: Option<String>,
    pub(super) clean: bool,
    pub(super) guard_from: u64,
}

fn number(table: &Table<'_, &str, &[u8]>, name: &str) -> Result<Option<u64>, StorageError> {
    let value = table.get(name)?;
    Ok(value.and_then(|v| v.value().try_into().ok().map(u64::from_le_bytes)))
}

impl Meta {
    pub(super) fn read(table: &Table<'_, &str, &[u8]>) -> Result<Self, StorageError> {
        let boot = table.get("boot")?.map(|v| v.value().to_vec());
        let clean = table.get("clean")?.is_some_and(|v| v.value() == [1]);
        Ok(Self {
            layout: number(table, "layout")?,
            applied: number(table, "applied")?.unwrap_or(0),
            last_entry_at: number(table, "last_entry_at")?.unwrap_or(0),
            boot: boot.and_then(|raw| String::from_utf8(raw).ok()),
            clean,
            guard_from: number(table, "guard_from")?.unwrap_or(0),
        })
    }

    pub(super) fn write(&self, table: &mut Table<'_, &str, &[u8]>) -> Result<(), StorageError> {
        table.insert("layout", LAYOUT.to_le_bytes().as_slice())?;
        table.insert("applied", self.applied.to_le_bytes().as_slice())?;
        table.insert("last_entry_at", self.last_entry_at.to_le_bytes().as_slice())?;
        match &self.boot {
            Some(boot) => table.insert("boot", boot.as_bytes())?,
            None => table.remove("boot")?,
        };
        table.insert("clean", [u8::from(self.clean)].as_slice())?;
        table.insert("guard_from", self.guard_from.to_le_bytes().as_slice())?;
        Ok(())
    }
}
