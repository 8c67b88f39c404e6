//! The embedded store: one redb file on local disk and a write-ahead log beside it.
//!
//! What survives what: a reservation (and a renewal or release) survives a crash of the process
//! once it is answered; a completion, an inbox acceptance or settlement and an admin delete
//! survive a crash of the machine once answered. All writes go through one writer thread
//! (`writer.rs`) that applies every queued operation in one redb transaction committed without
//! a sync, appends the batch's changes to the log (`wal.rs`, `journal.rs`) and answers at the
//! level each step needs, while a syncer thread (`syncer.rs`) syncs the log behind it: a keyed
//! request waits for at most one sync, shared with every request in the same stretch of the
//! log, and the next batch is written while the last one syncs. The log is made redundant by
//! periodic durable redb commits (checkpoints) and replayed on open after a crash
//! (`recovery.rs`); after a machine crash, fresh reservations wait out a lease (`guard.rs`).
//!
//! Reads (`get`, inbox counts and listings) open read transactions on a blocking thread. They
//! can see batches the syncer has not synced yet, so a read that could show one waits for that
//! sync first: nobody is shown what a machine crash could take back.
//!
//! Inbox queues (`queue.rs`, `inbox.rs`) live in tables of their own in the same file, written
//! by the same writer thread: an acknowledgement and its delivery are in one batch.
//!
//! Expiry: each value carries its absolute expiry (unix milliseconds, see `tables.rs`); an
//! expired record counts as absent everywhere. The writer purges expired records through an index
//! ordered by expiry, a bounded number with every batch and in sweeps when idle, so a store under
//! steady load with a short ttl reuses its pages instead of growing. Wall-clock time is used, not
//! a monotonic clock, because expiries must mean the same after a restart.

mod batch;
mod checksum;
mod guard;
mod inbox;
mod journal;
mod meta;
mod queue;
mod recovery;
mod replay;
mod syncer;
mod tables;
mod wal;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTableMetadata};

use idempotency_core::model::{
    now_millis, CompletedRecord, FencingToken, Fingerprint, InFlightRecord, Record, ScopedKey,
};
use idempotency_core::store::Inbox;
use idempotency_core::store::{Fenced, Removal, Removed, Reservation, Store, StoreError};
use syncer::Durability;
use tables::RECORDS;
use writer::{Answer, Op, Writer};

pub use guard::FileStoreOptions;
pub use writer::PURGE_INTERVAL;

/// A store in one local file and its write-ahead log, written by one writer thread.
///
/// ```
/// use std::time::Duration;
/// use idempotency_core::model::{Fingerprint, IdempotencyKey, RouteName, ScopedKey};
/// use idempotency_core::store::{Reservation, Store};
/// use idempotency_file_store::FileStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let path = std::env::temp_dir().join(format!("doc-{}.db", std::process::id()));
/// let store = FileStore::open(&path).unwrap();
/// let key = ScopedKey::new(
///     RouteName::new("payments").unwrap(),
///     None,
///     IdempotencyKey::new("order-1").unwrap(),
/// );
/// let reserved = store.reserve(&key, Fingerprint::from_bytes([7; 32]), Duration::from_secs(30));
/// assert!(matches!(reserved.await.unwrap(), Reservation::Acquired(_)));
/// # drop(store);
/// # std::fs::remove_file(&path).ok();
/// # }
/// ```
pub struct FileStore {
    path: PathBuf,
    // Declared before `db`: dropping the writer first waits for its thread, after which this is
    // the last handle and dropping it closes the file.
    writer: Writer,
    db: Arc<Database>,
    durability: Arc<Durability>,
}

/// The memory redb may use to cache pages of the store file.
const PAGE_CACHE_BYTES: usize = 16 * 1024 * 1024;

impl FileStore {
    /// Opens the store at `path` (and its log at `PATH-wal`), creating it (and any missing
    /// directories) if needed, and replays what a crash left in the log. This blocks on file
    /// I/O; async callers should run it on a blocking thread.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, &FileStoreOptions::default())
    }

    /// [`open`](Self::open), with `options`.
    pub fn open_with(path: &Path, options: &FileStoreOptions) -> Result<Self, StoreError> {
        let fail = |why: String| StoreError::Open(format!("file store {}: {why}", path.display()));
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| fail(format!("cannot create directory: {e}")))?;
        }
        // redb's page cache would otherwise grow to a large share of memory; records are small
        // and recent ones are also kept by the replay cache in front.
        let db = Database::builder()
            .set_cache_size(PAGE_CACHE_BYTES)
            .create(path)
            .map_err(|e| fail(explain(e)))?;
        let start = recovery::recover(path, Arc::new(db), options).map_err(fail)?;
        let (db, durability) = (start.db.clone(), start.durability.clone());
        let writer = Writer::spawn(start)
            .map_err(|e| fail(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            path: path.to_owned(),
            writer,
            db,
            durability,
        })
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many records the file holds, counting expired ones not purged yet.
    pub async fn stored_records(&self) -> Result<u64, StoreError> {
        self.read_unsynced(|txn| {
            let table = txn.open_table(RECORDS).map_err(read_failed)?;
            table.len().map_err(read_failed)
        })
        .await
    }

    /// Runs a read transaction on a blocking thread, and answers once everything it could
    /// have seen is synced.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(redb::ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let durability = self.durability.clone();
        let (value, seen) = self
            .read_unsynced(move |txn| {
                // Loaded after the transaction began: the writer raises it before each commit,
                // so it covers every batch the transaction can see.
                let seen = durability.applied();
                Ok((read(txn)?, seen))
            })
            .await?;
        self.durability.wait_synced(seen).await?;
        Ok(value)
    }

    /// Runs a read transaction on a blocking thread, for what shows no record.
    async fn read_unsynced<T: Send + 'static>(
        &self,
        read: impl FnOnce(redb::ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        if let Some(why) = self.durability.failure() {
            return Err(StoreError::Unavailable(format!(
                "the file store stopped writing ({why}); restart the proxy"
            )));
        }
        let db = self.db.clone();
        let run = move || read(db.begin_read().map_err(read_failed)?);
        tokio::task::spawn_blocking(run)
            .await
            .map_err(read_failed)?
    }

    async fn fenced(&self, op: Op) -> Result<Fenced, StoreError> {
        match self.writer.submit(op).await? {
            Answer::Fenced(fenced) => Ok(fenced),
            _ => Err(mismatch()),
        }
    }
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// An open failure in words an operator can act on.
fn explain(error: DatabaseError) -> String {
    use redb::StorageError::{Corrupted, Io};
    match error {
        DatabaseError::DatabaseAlreadyOpen => {
            "already open by another process (or another store in this one)".into()
        }
        // redb reports a file without its magic header as invalid data.
        DatabaseError::Storage(Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            "not a store file (it is not a redb database); refusing to touch it".into()
        }
        DatabaseError::Storage(Io(e)) => e.to_string(),
        DatabaseError::Storage(Corrupted(why)) => format!("the store file is corrupted: {why}"),
        other => format!("cannot use the store file: {other}"),
    }
}

fn mismatch() -> StoreError {
    StoreError::Unavailable("file store writer gave an answer of the wrong kind".into())
}

fn read_failed(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("file store read failed: {e}"))
}

/// A stored value taken apart as the store reads it: its expiry and its encoded record.
#[doc(hidden)]
pub fn split_value(value: &[u8]) -> (u64, &[u8]) {
    (tables::expiry(value), tables::record(value))
}

/// The value the store writes for an encoded record that expires at `expiry`.
#[doc(hidden)]
pub fn join_value(expiry: u64, record: &[u8]) -> Vec<u8> {
    let mut value = tables::unstamped(record);
    tables::stamp(&mut value, expiry);
    value
}

fn decode(raw: Vec<u8>) -> Result<Record, StoreError> {
    Ok(Record::decode(Bytes::from(raw))?)
}

/// The live record under `key` and its time left, from a read transaction.
fn lookup(
    txn: &redb::ReadTransaction,
    key: &str,
) -> Result<Option<(Record, Duration)>, StoreError> {
    let table = txn.open_table(RECORDS).map_err(read_failed)?;
    let Some(value) = table.get(key).map_err(read_failed)? else {
        return Ok(None);
    };
    let value = value.value();
    let now = now_millis();
    let expiry = tables::expiry(value);
    if expiry <= now {
        return Ok(None);
    }
    let record = decode(tables::record(value).to_vec())?;
    Ok(Some((record, Duration::from_millis(expiry - now))))
}

#[async_trait]
impl Store for FileStore {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        let (token, record) = InFlightRecord::fresh(fingerprint);
        let value = tables::unstamped(&record.encode());
        let key = key.storage_key().to_owned();
        match self
            .writer
            .submit(Op::Reserve { key, value, lease })
            .await?
        {
            Answer::Acquired => Ok(Reservation::Acquired(token)),
            Answer::Existing(raw) => Ok(decode(raw)?.into()),
            Answer::Recovering(wait) => Err(StoreError::Recovering(wait)),
            _ => Err(mismatch()),
        }
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        let key = key.storage_key().to_owned();
        self.fenced(Op::Renew { key, token, lease }).await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let value = tables::unstamped(&record.encode());
        let (key, token) = (key.storage_key().to_owned(), record.token);
        self.fenced(Op::Complete {
            key,
            token,
            value,
            ttl,
        })
        .await
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        let key = key.storage_key().to_owned();
        self.fenced(Op::Release { key, token }).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let key = key.storage_key().to_owned();
        self.read(move |txn| lookup(&txn, &key)).await
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        let key = key.storage_key().to_owned();
        match self.writer.submit(Op::Remove { key, removal }).await? {
            Answer::Removed(removed) => Ok(removed),
            _ => Err(mismatch()),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.read_unsynced(|txn| txn.open_table(RECORDS).map(drop).map_err(read_failed))
            .await
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        Some(self)
    }
}
