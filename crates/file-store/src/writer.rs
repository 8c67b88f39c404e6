//! The single writer thread: every write goes through it, a batch at a time.
//!
//! Callers queue an `Op` with a oneshot for the answer. The thread takes everything waiting (up to
//! `MAX_BATCH`), applies it in one redb transaction in arrival order, purges a few expired
//! records, commits without syncing, and appends what the batch changed to the write-ahead log
//! as one entry (`wal.rs`): a `pwrite`, after which the batch survives a crash of the process.
//! Then it answers, each caller at the level its step needs:
//! - a reservation, renewal or release at once: it must survive the process, not the machine;
//! - a completion, an admin delete and every inbox write once the syncer thread has synced the
//!   log past the batch (`syncer.rs`); meanwhile this thread writes the next batches;
//! - a reservation that finds a completed record whose entry is not synced yet waits for that
//!   sync, so no one is shown an answer that a machine crash could still take back.
//!
//! Checkpoints: the log is made redundant by a durable redb commit, after which it is written
//! from the front again. One is taken when the log passes `CHECKPOINT_BYTES` or has been
//! growing for `CHECKPOINT_INTERVAL`, in every idle sweep of expired records (the durable
//! commit is also what lets redb reuse the pages they freed), and on close, which also marks
//! the store as closed cleanly and removes the log.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::Database;
use tokio::sync::oneshot;

use super::batch::{apply_one, Clock};
pub(super) use super::batch::{Answer, Op, Reply};
use super::guard::Guard;
use super::journal::Journal;
use super::meta::{Meta, META};
use super::queue::QueueTables;
use super::syncer::{Durability, Syncer};
use super::tables::Tables;
use super::wal::LogFile;
use idempotency_core::model::now_millis;
use idempotency_core::store::{Fenced, StoreError};

/// Bounds one transaction, so a flood of callers still gets answers in steady instalments.
const MAX_BATCH: usize = 512;
/// At least as many as a batch can add, so purging keeps pace with any steady load.
const PURGE_PER_BATCH: usize = 2 * MAX_BATCH;
/// How long the writer waits idle before sweeping expired records on its own.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(1);
/// Records purged per idle sweep transaction; a full sweep is followed at once by another.
const SWEEP_CHUNK: usize = 8192;
/// A checkpoint stalls the writer for one durable redb commit; this many log bytes (a few
/// seconds of the heaviest load measured) spread that over many batches and bound what a
/// start after a crash replays.
const CHECKPOINT_BYTES: u64 = 32 << 20;
/// Bounds how long redb keeps pages it may not reuse before a durable commit.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);

/// What the writer thread starts from: the opened file, its log, and what recovery found.
pub(super) struct Start {
    pub(super) db: Arc<Database>,
    pub(super) log: LogFile,
    pub(super) log_path: PathBuf,
    pub(super) meta: Meta,
    pub(super) guard: Guard,
    pub(super) durability: Arc<Durability>,
}

pub(super) struct Writer {
    queue: Option<mpsc::Sender<(Op, Reply)>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn spawn(start: Start) -> std::io::Result<Self> {
        let syncer = Syncer::spawn(start.durability.clone(), start.log.sync_handle()?)?;
        let (queue, jobs) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("file-store-writer".into())
            .spawn(move || WriterThread::new(start, syncer).run(&jobs))?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Queues `op` and waits until it is as durable as its step needs (or failed).
    pub(super) async fn submit(&self, op: Op) -> Result<Answer, StoreError> {
        let stopped = || StoreError::Unavailable("the file store writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        let queue = self.queue.as_ref().ok_or_else(stopped)?;
        queue.send((op, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

impl Drop for Writer {
    // Closing the queue lets the thread finish what is queued, checkpoint and exit; waiting for
    // it means the database file is unlocked once the store is gone, so it can be opened again
    // at once.
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// When an answer may go out.
enum Visibility {
    /// Once its batch is written: it changes only what must survive the process.
    Written,
    /// Once everything written before it is synced.
    Synced,
    /// `reserve`: at once, unless it shows a completion whose entry is not synced yet.
    ShowsRecord(String),
    /// A completion or an acceptance of `key`: synced, and remembered until it is.
    Completes(String),
}

impl Visibility {
    fn of(op: &Op) -> Self {
        match op {
            Op::Reserve { key, .. } => Self::ShowsRecord(key.clone()),
            Op::Renew { .. } | Op::Release { .. } => Self::Written,
            Op::Complete { key, .. } | Op::Accept { key, .. } => Self::Completes(key.clone()),
            Op::Remove { .. } | Op::Queue(_) => Self::Synced,
        }
    }
}

/// What a batch left: each answer with when it may go out, and the changes to log, if any.
type Applied = (Vec<(Answer, Visibility)>, Option<[Journal; 2]>);

struct WriterThread {
    db: Arc<Database>,
    log: LogFile,
    log_path: PathBuf,
    /// `applied` is the last entry written to the log.
    meta: Meta,
    guard: Guard,
    durability: Arc<Durability>,
    syncer: Option<Syncer>,
    /// Keys completed by entries that may not be synced yet, and the entry of each.
    unsynced_completions: HashMap<String, u64>,
    prune_at: usize,
    checkpointed: Instant,
}

impl WriterThread {
    fn new(start: Start, syncer: Syncer) -> Self {
        Self {
            db: start.db,
            log: start.log,
            log_path: start.log_path,
            meta: start.meta,
            guard: start.guard,
            durability: start.durability,
            syncer: Some(syncer),
            unsynced_completions: HashMap::new(),
            prune_at: MIN_PRUNE,
            checkpointed: Instant::now(),
        }
    }

    fn run(mut self, jobs: &Receiver<(Op, Reply)>) {
        let mut wait = PURGE_INTERVAL;
        loop {
            match jobs.recv_timeout(wait) {
                Ok(first) => {
                    let batch: Vec<_> = std::iter::once(first)
                        .chain(jobs.try_iter().take(MAX_BATCH - 1))
                        .collect();
                    self.commit_batch(batch);
                    if self.log.written() >= CHECKPOINT_BYTES
                        || (self.log.written() > 0
                            && self.checkpointed.elapsed() >= CHECKPOINT_INTERVAL)
                    {
                        self.checkpoint(0, false);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    // A full chunk means there may be more: sweep again unless work arrives.
                    let swept = self.checkpoint(SWEEP_CHUNK, false);
                    wait = if swept == SWEEP_CHUNK {
                        Duration::ZERO
                    } else {
                        PURGE_INTERVAL
                    };
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.close();
    }

    fn commit_batch(&mut self, batch: Vec<(Op, Reply)>) {
        let (ops, replies): (Vec<Op>, Vec<Reply>) = batch.into_iter().unzip();
        if let Some(why) = self.durability.failure() {
            return refuse(replies, &format!("the file store stopped writing ({why})"));
        }
        let clock = Clock {
            now: now_millis(),
            guard: self.guard,
        };
        let seq = self.meta.applied + 1;
        let (answers, journals) = match self.apply(ops, seq, clock) {
            Ok(applied) => applied,
            // Nothing of the batch was committed, so every caller in it hears of the failure.
            Err(e) => return refuse(replies, &format!("file store write failed: {e}")),
        };
        if let Some(journals) = journals {
            let parts = [journals[0].as_bytes(), journals[1].as_bytes()];
            if let Err(e) = self.log.append(seq, clock.now, &parts) {
                // The tables hold changes the log lacks: nothing more may be written or read.
                let why = format!("writing the write-ahead log failed: {e}");
                self.durability.fail(why.clone());
                return refuse(replies, &why);
            }
            self.meta.applied = seq;
            self.meta.last_entry_at = clock.now;
            self.durability.written(seq);
        }
        for (reply, (answer, visibility)) in replies.into_iter().zip(answers) {
            self.answer(reply, answer, &visibility);
        }
        self.prune();
    }

    /// Applies `ops` and a purge in one transaction, committed without a sync.
    fn apply(&mut self, ops: Vec<Op>, seq: u64, clock: Clock) -> Result<Applied, redb::Error> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(redb::Durability::None)?;
        let (answers, journals, purged) = {
            let mut tables = Tables::open(&txn)?;
            // Only a batch with inbox work pays for opening the queue tables.
            let mut queues = None;
            let mut answers = Vec::with_capacity(ops.len());
            for op in ops {
                if op.touches_queues() && queues.is_none() {
                    queues = Some(QueueTables::open(&txn)?);
                }
                let visibility = Visibility::of(&op);
                let answer = apply_one(&mut tables, queues.as_mut(), op, clock)?;
                if let (Visibility::Completes(key), true) = (&visibility, completes(&answer)) {
                    self.unsynced_completions.insert(key.clone(), seq);
                }
                answers.push((answer, visibility));
            }
            let purged = tables.purge(clock.now, PURGE_PER_BATCH)?;
            let queued = queues.map(|mut queues| queues.take_journal());
            let journals = [tables.take_journal(), queued.unwrap_or_default()];
            (answers, journals, purged)
        };
        let logged = journals.iter().any(|journal| !journal.is_empty());
        if logged {
            self.durability.applying(seq);
        } else if purged == 0 {
            txn.abort()?;
            return Ok((answers, None));
        }
        if let Err(e) = txn.commit() {
            // Nothing of the batch is visible: readers must not wait for an entry never written.
            self.durability.applying(seq - 1);
            return Err(e.into());
        }
        Ok((answers, logged.then_some(journals)))
    }

    fn answer(&self, reply: Reply, answer: Answer, visibility: &Visibility) {
        let wait_for = match (visibility, &answer) {
            (Visibility::Written, _) => None,
            (Visibility::Synced | Visibility::Completes(_), _) => Some(self.meta.applied),
            (Visibility::ShowsRecord(key), Answer::Existing(_)) => {
                self.unsynced_completions.get(key).copied()
            }
            (Visibility::ShowsRecord(_), _) => None,
        };
        match wait_for {
            Some(seq) => self.durability.answer_when_synced(seq, reply, answer),
            None => {
                let _ = reply.send(Ok(answer));
            }
        }
    }

    /// Forgets completions that are synced, when there are enough to be worth the pass.
    fn prune(&mut self) {
        if self.unsynced_completions.len() < self.prune_at {
            return;
        }
        let synced = self.durability.synced();
        self.unsynced_completions.retain(|_, seq| *seq > synced);
        self.prune_at = (2 * self.unsynced_completions.len()).max(MIN_PRUNE);
    }

    /// A durable commit (with up to `purge` expired records purged), after which the log is
    /// redundant; returns how many were purged.
    fn checkpoint(&mut self, purge: usize, clean: bool) -> usize {
        if self.durability.failure().is_some() {
            return 0;
        }
        match self.try_checkpoint(purge, clean) {
            Ok(swept) => swept,
            Err(e) => {
                tracing::warn!(error = %e, "file store: checkpoint failed; the write-ahead log keeps every write meanwhile");
                0
            }
        }
    }

    fn try_checkpoint(&mut self, purge: usize, clean: bool) -> Result<usize, redb::Error> {
        let txn = self.db.begin_write()?;
        let swept = Tables::open(&txn)?.purge(now_millis(), purge)?;
        if swept == 0 && self.log.written() == 0 && !clean {
            txn.abort()?;
            return Ok(0);
        }
        let meta = Meta {
            clean,
            ..self.meta.clone()
        };
        meta.write(&mut txn.open_table(META)?)?;
        txn.commit()?;
        self.durability.reached(self.meta.applied);
        self.log.rewind();
        self.unsynced_completions.clear();
        self.checkpointed = Instant::now();
        Ok(swept)
    }

    /// The last checkpoint, marked clean; the log goes with it.
    fn close(mut self) {
        let clean = self.durability.failure().is_none() && self.try_checkpoint(0, true).is_ok();
        drop(self.syncer.take());
        if clean {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// Below this many, remembered completions are not worth a pass to forget.
const MIN_PRUNE: usize = 1024;

fn completes(answer: &Answer) -> bool {
    matches!(answer, Answer::Acquired | Answer::Fenced(Fenced::Applied))
}

fn refuse(replies: Vec<Reply>, why: &str) {
    for reply in replies {
        let _ = reply.send(Err(StoreError::Unavailable(why.to_owned())));
    }
}
