//! The embedded store: one redb file on local disk, durable across crashes of the process.
//!
//! Durability: every write (`reserve`, `renew`, `complete`, `release`, `remove`) is committed with
//! `Durability::Immediate`, so the file is fsynced before the caller gets its answer. An
//! acknowledged reservation or completion survives a SIGKILL or a power cut; redb's copy-on-write
//! commits mean a crash mid-commit leaves the previous state, never a torn record. Opening a file
//! after a crash first rebuilds redb's free-page state by walking the file, so that first open
//! takes longer the larger the file is.
//!
//! Group commit: an fsync costs milliseconds, so paying one per request would cap the proxy at a
//! few hundred writes a second. All writes go through one writer thread (`writer.rs`) that applies
//! every queued operation in a single transaction and commits once, then answers each caller.
//! Each operation still sees the effects of those before it in the batch, so a batch behaves
//! exactly like the same operations one after another: `reserve` looks up and inserts in the same
//! transaction, and the fenced writes act only on the in-flight record of the caller's token.
//! Reads (`get`, `ping`) open read transactions on a blocking thread and see committed state only.
//!
//! Inbox queues (`queue.rs`, `inbox.rs`) live in tables of their own in the same file, written
//! by the same writer thread: an acknowledgement and its delivery commit in one transaction.
//!
//! Expiry: each value carries its absolute expiry (unix milliseconds, see `tables.rs`); an
//! expired record counts as absent everywhere. The writer purges expired records through an index
//! ordered by expiry, a bounded number with every batch and in sweeps when idle, so a store under
//! steady load with a short ttl reuses its pages instead of growing. Wall-clock time is used, not
//! a monotonic clock, because expiries must mean the same after a restart.

mod inbox;
mod queue;
mod tables;
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
use tables::{EXPIRIES, RECORDS};
use writer::{Answer, Op, Writer};

pub use writer::PURGE_INTERVAL;

/// A store in one local file, written by one writer thread with group commit.
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
}

/// The memory redb may use to cache pages of the store file.
const PAGE_CACHE_BYTES: usize = 16 * 1024 * 1024;

impl FileStore {
    /// Opens the database at `path`, creating it (and any missing directories) if needed. This
    /// blocks on file I/O; async callers should run it on a blocking thread.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
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
        let txn = db.begin_write().map_err(|e| fail(e.to_string()))?;
        // Created up front so that read transactions always find both tables.
        for result in [
            txn.open_table(RECORDS).map(drop),
            txn.open_table(EXPIRIES).map(drop),
            txn.open_table(queue::INBOX).map(drop),
            txn.open_table(queue::INBOX_DUE).map(drop),
            txn.open_table(queue::INBOX_DEAD).map(drop),
        ] {
            result.map_err(|e| fail(e.to_string()))?;
        }
        txn.commit().map_err(|e| fail(e.to_string()))?;
        let db = Arc::new(db);
        let writer = Writer::spawn(db.clone())
            .map_err(|e| fail(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            path: path.to_owned(),
            writer,
            db,
        })
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many records the file holds, counting expired ones not purged yet.
    pub async fn stored_records(&self) -> Result<u64, StoreError> {
        self.read(|txn| {
            let table = txn.open_table(RECORDS).map_err(read_failed)?;
            table.len().map_err(read_failed)
        })
        .await
    }

    /// Runs a read transaction on a blocking thread.
    async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(redb::ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
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
        self.read(|txn| txn.open_table(RECORDS).map(drop).map_err(read_failed))
            .await
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        Some(self)
    }
}
