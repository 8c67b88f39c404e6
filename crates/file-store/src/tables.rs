//! The two tables in the file and the layout of a stored value.
//!
//! `records` maps a storage key to its value: the absolute expiry (unix milliseconds, 8 bytes big
//! endian) followed by `Record::encode()`. Keeping the expiry inside the value, rather than in a
//! table of its own, means one lookup answers both "is there a record?" and "is it still alive?",
//! and the two can never disagree. `expiries` is only an index for purging: it holds
//! `(expiry, key)` for every record, so the expired ones are the first entries in key order.
//!
//! Every change to `records` is also written to a [`Journal`], which the writer appends to the
//! write-ahead log; `expiries` follows from `records` and is rebuilt by the same calls on replay.

use redb::{ReadableTable, StorageError, Table, TableDefinition, TableError, WriteTransaction};

use super::journal::Journal;
use idempotency_core::model::FencingToken;

pub(super) const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
pub(super) const EXPIRIES: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiries");

const EXPIRY_LEN: usize = 8;

/// A stored value with room for its expiry, which is stamped when the write is applied.
pub(super) fn unstamped(record: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(EXPIRY_LEN + record.len());
    value.extend_from_slice(&[0; EXPIRY_LEN]);
    value.extend_from_slice(record);
    value
}

pub(super) fn stamp(value: &mut [u8], expiry: u64) {
    value[..EXPIRY_LEN].copy_from_slice(&expiry.to_be_bytes());
}

/// The expiry of a value; a value too short to hold one counts as long expired.
pub(super) fn expiry(value: &[u8]) -> u64 {
    value
        .get(..EXPIRY_LEN)
        .and_then(|raw| raw.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The encoded record inside a value.
pub(super) fn record(value: &[u8]) -> &[u8] {
    value.get(EXPIRY_LEN..).unwrap_or_default()
}

/// Both tables, opened inside one write transaction, and the changes made to them.
pub(super) struct Tables<'txn> {
    records: Table<'txn, &'static str, &'static [u8]>,
    expiries: Table<'txn, (u64, &'static str), ()>,
    journal: Journal,
}

impl<'txn> Tables<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<Self, TableError> {
        Ok(Self {
            records: txn.open_table(RECORDS)?,
            expiries: txn.open_table(EXPIRIES)?,
            journal: Journal::default(),
        })
    }

    /// The changes made through these tables so far, leaving none.
    pub(super) fn take_journal(&mut self) -> Journal {
        std::mem::take(&mut self.journal)
    }

    /// The value under `key` if it has not expired by `now`.
    pub(super) fn live(&self, key: &str, now: u64) -> Result<Option<Vec<u8>>, StorageError> {
        let value = self.records.get(key)?.map(|guard| guard.value().to_vec());
        Ok(value.filter(|value| expiry(value) > now))
    }

    /// The live value under `key` if it is the in-flight record of `token`.
    pub(super) fn held_by(
        &self,
        key: &str,
        token: FencingToken,
        now: u64,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let value = self.live(key, now)?;
        Ok(value.filter(|value| record(value).starts_with(&token.in_flight_prefix())))
    }

    /// Writes a stamped value, moving its index entry along with it.
    pub(super) fn put(&mut self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        self.journal.record_put(key, value);
        let old = self
            .records
            .insert(key, value)?
            .map(|old| expiry(old.value()));
        if let Some(old) = old {
            self.expiries.remove((old, key))?;
        }
        self.expiries.insert((expiry(value), key), ())?;
        Ok(())
    }

    /// Deletes whatever is under `key`, expired or not.
    pub(super) fn delete(&mut self, key: &str) -> Result<(), StorageError> {
        if self.remove(key)? {
            self.journal.record_delete(key);
        }
        Ok(())
    }

    /// Removes `key` and its index entry without journaling it; whether it was there.
    fn remove(&mut self, key: &str) -> Result<bool, StorageError> {
        let old = self.records.remove(key)?.map(|old| expiry(old.value()));
        let Some(old) = old else {
            return Ok(false);
        };
        self.expiries.remove((old, key))?;
        Ok(true)
    }

    /// Deletes up to `limit` records that expired by `now`, oldest first; returns how many.
    /// Purges are not journaled: one lost in a crash brings back only records that count as
    /// absent anyway, and the next purge takes them again.
    pub(super) fn purge(&mut self, now: u64, limit: usize) -> Result<usize, StorageError> {
        let mut expired = Vec::new();
        for entry in self.expiries.range::<(u64, &str)>(..(now + 1, ""))? {
            if expired.len() == limit {
                break;
            }
            expired.push(entry?.0.value().1.to_owned());
        }
        for key in &expired {
            self.remove(key)?;
        }
        Ok(expired.len())
    }
}
