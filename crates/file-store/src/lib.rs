//! The embedded store: a log of segments on local disk (`PATH-log`), an index of it in memory,
//! and a small store file (`PATH`) that says how the store was last closed.
//!
//! What survives what: a reservation (and a renewal or release) survives a crash of the process
//! once it is answered; a completion, an inbox acceptance or settlement and an admin delete
//! survive a crash of the machine once answered. Every operation goes through one writer thread
//! (`writer.rs`) that applies a batch of them to the index in memory (`records.rs`, `queue.rs`),
//! appends the batch's changes to the log as one entry (`log.rs`, `journal.rs`) and answers at
//! the level each step needs, while a syncer thread (`syncer.rs`) syncs the log behind it: a
//! keyed request waits for at most one sync, shared with every request in the same stretch of
//! the log, and the next batch is written while the last one syncs. Nothing on that path
//! copies a B-tree page: the log is the store (the Bitcask design).
//!
//! A completed record stays in the log, found through the index (`index.rs`: 24 bytes a record
//! in memory), and is read back when a replay asks for it. The log is read whole at open
//! (`recovery.rs`), converting a file of the previous release first (`convert.rs`); after a
//! machine crash, fresh reservations wait out a lease (`guard.rs`). Reads that could show a
//! batch not synced yet wait for that sync: nobody is shown what a machine crash could take
//! back.
//!
//! Space: each record carries its absolute expiry (unix milliseconds, `values.rs`); an expired
//! record counts as absent everywhere. The oldest segment is retired once little of it is still
//! current (`space.rs`): a retirer thread reads it (`retire.rs`), the writer writes what is
//! current of it again at the head, and the file is deleted, so a store under steady load with
//! a fixed ttl stays the size of a ttl of writes. Wall-clock time is used, not a monotonic
//! clock, because expiries must mean the same after a restart.

mod batch;
mod change;
mod checksum;
mod convert;
mod guard;
mod housekeeping;
mod inbox;
mod index;
mod journal;
mod log;
mod meta;
mod open_error;
mod options;
mod queue;
mod queue_log;
mod records;
mod recovery;
mod retire;
mod segment;
mod space;
mod state;
mod syncer;
mod values;
mod writer;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, DatabaseError};

use idempotency_core::backend::Inbox;
use idempotency_core::backend::{
    now_millis, CompletedRecord, FencingToken, Fingerprint, InFlightRecord, Record, ScopedKey,
};
use idempotency_core::{
    backend::{Fenced, Removal, Removed, Reservation},
    Store, StoreError,
};
use open_error::OpenError;
use writer::{Answer, Op, Writer};

pub use options::{FileStoreOptions, SEGMENT_BYTES};
pub use writer::PURGE_INTERVAL;

/// A store in one local file and its write-ahead log, written by one writer thread.
///
/// ```
/// use std::time::Duration;
/// use idempotency_core::backend::{Fingerprint, IdempotencyKey, RouteName, ScopedKey};
/// use idempotency_core::{Store, backend::Reservation};
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
    writer: Writer,
}

/// The memory redb may use to cache pages of the store file, which holds only its state.
const PAGE_CACHE_BYTES: usize = 1 << 20;

impl FileStore {
    /// Opens the store at `path` (and its log in the folder `PATH-log`), creating it (and any
    /// missing directories) if needed, reads the log into memory, and converts a file of the
    /// previous release. This blocks on file I/O; async callers should run it on a blocking
    /// thread.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, &FileStoreOptions::default())
    }

    /// [`open`](Self::open), with `options`.
    pub fn open_with(path: &Path, options: &FileStoreOptions) -> Result<Self, StoreError> {
        let fail = |refused: OpenError| refused.at(path);
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| fail(OpenError::because("cannot create directory", e)))?;
        }
        recovery::refuse_half_a_store(path).map_err(fail)?;
        let db = Database::builder()
            .set_cache_size(PAGE_CACHE_BYTES)
            .create(path)
            .map_err(|e| fail(explain(e)))?;
        let start = recovery::open(path, db, options).map_err(fail)?;
        let writer = Writer::spawn(start, log::dir_of(path))
            .map_err(|e| fail(OpenError::because("cannot start the writer thread", e)))?;
        Ok(Self {
            path: path.to_owned(),
            writer,
        })
    }

    /// The file the store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder of the store's log, beside its file.
    pub fn log_dir(&self) -> PathBuf {
        log::dir_of(&self.path)
    }

    /// How many records the store holds, counting expired ones not forgotten yet.
    pub async fn stored_records(&self) -> Result<u64, StoreError> {
        match self.writer.submit(Op::Count).await? {
            Answer::Count(count) => Ok(count),
            _ => Err(mismatch()),
        }
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
fn explain(error: DatabaseError) -> OpenError {
    use redb::StorageError::{Corrupted, Io};
    match error {
        DatabaseError::DatabaseAlreadyOpen => {
            OpenError::new("already open by another process (or another store in this one)")
        }
        // redb reports a file without its magic header as invalid data.
        DatabaseError::Storage(Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            OpenError::new("not a store file (it is not a redb database); refusing to touch it")
        }
        DatabaseError::Storage(Io(e)) => OpenError::because("cannot open the store file", e),
        DatabaseError::Storage(Corrupted(why)) => {
            OpenError::new(format!("the store file is corrupted: {why}"))
        }
        other => OpenError::because("cannot use the store file", other),
    }
}

fn mismatch() -> StoreError {
    StoreError::unavailable("file store writer gave an answer of the wrong kind")
}

fn decode(raw: Vec<u8>) -> Result<Record, StoreError> {
    Ok(Record::decode(Bytes::from(raw))?)
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
        let value = values::unstamped(&record.encode());
        let key = key.clone();
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
        let key = key.clone();
        self.fenced(Op::Renew { key, token, lease }).await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let value = values::unstamped(&record.encode());
        let (key, token) = (key.clone(), record.token);
        self.fenced(Op::Complete {
            key,
            token,
            value,
            ttl,
        })
        .await
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        let key = key.clone();
        self.fenced(Op::Release { key, token }).await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let key = key.clone();
        let Answer::Record(value) = self.writer.submit(Op::Get { key }).await? else {
            return Err(mismatch());
        };
        let Some(value) = value else {
            return Ok(None);
        };
        let left = values::expiry(&value).saturating_sub(now_millis());
        let record = decode(values::record(&value).to_vec())?;
        Ok(Some((record, Duration::from_millis(left))))
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        let key = key.clone();
        match self.writer.submit(Op::Remove { key, removal }).await? {
            Answer::Removed(removed) => Ok(removed),
            _ => Err(mismatch()),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self.writer.submit(Op::Ping).await? {
            Answer::Pong => Ok(()),
            _ => Err(mismatch()),
        }
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        Some(self)
    }
}
