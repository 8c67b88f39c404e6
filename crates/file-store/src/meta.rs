//! The store file itself (`PATH`): a redb file holding the `meta` table, where the store says
//! which layout it is in, on which boot it was opened and whether it was closed cleanly. It is
//! written twice in a process's life (at open and at a clean close), each time with a durable
//! commit; redb's lock on it keeps a second process off the store.
//!
//! - `layout`: 2 since the records live in the segment log (`PATH-log`); 1 was the release that
//!   kept them in redb tables behind a write-ahead log (`PATH-wal`), and a file without the
//!   key was written by the release before that, which synced every write and kept no log.
//! - `boot`: the machine's boot id when the store was opened; `clean`: whether it was closed.
//! - `guard_from`: when the last entry before a machine crash was written (unix ms), kept so
//!   that a second start within the wait still waits.
//! - `opened_at`: when the store was last opened (unix ms): after a machine crash that left no
//!   entry of that run in the log, the wait counts from there.
//! - `applied` and `last_entry_at` (layout 1 only): how far that release's file had taken its
//!   write-ahead log, and when that log's last entry was written; read when converting.

use redb::{ReadableTable, StorageError, Table, TableDefinition};

pub(super) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The layout this release writes.
pub(super) const LAYOUT: u64 = 2;

/// The `meta` table's contents.
#[derive(Debug, Default, Clone)]
pub(super) struct Meta {
    pub(super) layout: Option<u64>,
    pub(super) boot: Option<String>,
    pub(super) clean: bool,
    pub(super) guard_from: u64,
    pub(super) opened_at: u64,
    pub(super) applied: u64,
    pub(super) last_entry_at: u64,
}

fn number(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &str,
) -> Result<Option<u64>, StorageError> {
    let value = table.get(name)?;
    Ok(value.and_then(|v| v.value().try_into().ok().map(u64::from_le_bytes)))
}

impl Meta {
    pub(super) fn read(
        table: &impl ReadableTable<&'static str, &'static [u8]>,
    ) -> Result<Self, StorageError> {
        let boot = table.get("boot")?.map(|v| v.value().to_vec());
        let clean = table.get("clean")?.is_some_and(|v| v.value() == [1]);
        Ok(Self {
            layout: number(table, "layout")?,
            boot: boot.and_then(|raw| String::from_utf8(raw).ok()),
            clean,
            guard_from: number(table, "guard_from")?.unwrap_or(0),
            opened_at: number(table, "opened_at")?.unwrap_or(0),
            applied: number(table, "applied")?.unwrap_or(0),
            last_entry_at: number(table, "last_entry_at")?.unwrap_or(0),
        })
    }

    /// Writes this layout's keys, and drops those only the previous one had.
    pub(super) fn write(&self, table: &mut Table<'_, &str, &[u8]>) -> Result<(), StorageError> {
        table.insert("layout", LAYOUT.to_le_bytes().as_slice())?;
        match &self.boot {
            Some(boot) => table.insert("boot", boot.as_bytes())?,
            None => table.remove("boot")?,
        };
        table.insert("clean", [u8::from(self.clean)].as_slice())?;
        table.insert("guard_from", self.guard_from.to_le_bytes().as_slice())?;
        table.insert("opened_at", self.opened_at.to_le_bytes().as_slice())?;
        table.remove("applied")?;
        table.remove("last_entry_at")?;
        Ok(())
    }
}
