//! The single writer thread: every operation goes through it, a batch at a time.
//!
//! Callers queue an `Op` with a oneshot for the answer. The thread takes everything waiting (up to
//! `MAX_BATCH`), applies it to the in-memory index in arrival order, and appends what the batch
//! changed to the head segment of the log as one entry: a `pwrite`, after which the batch
//! survives a crash of the process. No B-tree, no page copied: a keyed request's reservation
//! and completion are each a lookup in memory and a few dozen bytes of the entry. Then it
//! answers, each caller at the level its step needs:
//! - a reservation, renewal or release at once: it must survive the process, not the machine;
//! - a completion, an admin delete and every inbox write once the syncer thread has synced the
//!   log past the batch (`syncer.rs`); meanwhile this thread writes the next batches;
//! - a reservation that finds a completed record whose entry is not synced yet waits for that
//!   sync, and so does every read (`get`, inbox counts and listings): no one is shown an answer
//!   that a machine crash could still take back.
//!
//! Between batches it keeps the log's size in hand: a full head segment is synced and a new one
//! started; the oldest segment, once little of it is current, is handed to the retirer thread
//! (`retire.rs`), whose puts come back as messages applied in a batch like any operation, and
//! is deleted once what moved on from it is synced.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::Database;
use tokio::sync::oneshot;

use super::batch::Batch;
pub(super) use super::batch::{Answer, Op, Reply};
use super::guard::Guard;
use super::index::KeyDigest;
use super::journal::Journal;
use super::log::Log;
use super::meta::{Meta, META};
use super::retire::{Chunk, Retirer};
use super::state::State;
use super::syncer::{Durability, Syncer};
use idempotency_core::model::now_millis;
use idempotency_core::store::{Fenced, StoreError};

/// Bounds one batch, so a flood of callers still gets answers in steady instalments.
const MAX_BATCH: usize = 512;
/// How long the writer waits idle before it forgets expired reservations and lets a head
/// segment whose records have all expired go.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(1);
/// How soon a retired segment whose moved puts await their sync is looked at again.
const RETIRE_POLL: Duration = Duration::from_millis(5);

/// What the writer thread is sent.
pub(super) enum Msg {
    Op(Op, Reply),
    /// Part of a segment being retired, from the retirer thread.
    Retired(Chunk),
    Close,
}

/// What the writer thread starts from: the store file, the log, and what was read from it.
pub(super) struct Start {
    pub(super) db: Database,
    pub(super) meta: Meta,
    pub(super) log: Log,
    pub(super) state: State,
    pub(super) last_seq: u64,
    pub(super) guard: Guard,
    pub(super) durability: Arc<Durability>,
}

pub(super) struct Writer {
    queue: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn spawn(start: Start, dir: std::path::PathBuf) -> std::io::Result<Self> {
        let syncer = Syncer::spawn(start.durability.clone())?;
        let (queue, jobs) = mpsc::channel();
        let retirer = Retirer::spawn(dir, queue.clone())?;
        let thread = std::thread::Builder::new()
            .name("file-store-writer".into())
            .spawn(move || WriterThread::new(start, syncer, retirer).run(&jobs))?;
        Ok(Self {
            queue,
            thread: Some(thread),
        })
    }

    /// Queues `op` and waits until it is as durable as its step needs (or failed).
    pub(super) async fn submit(&self, op: Op) -> Result<Answer, StoreError> {
        let stopped = || StoreError::Unavailable("the file store writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.queue.send(Msg::Op(op, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

impl Drop for Writer {
    // The thread finishes what is queued, syncs, marks the store closed cleanly and exits;
    // waiting for it means the store file is unlocked once the store is gone, so it can be
    // opened again at once.
    fn drop(&mut self) {
        let _ = self.queue.send(Msg::Close);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// When an answer may go out.
enum Visibility {
    /// Once its batch is written: it changes only what must survive the process, or shows
    /// no record.
    Written,
    /// Once everything written before it is synced.
    Synced,
    /// `reserve`: at once, unless it shows a completion whose entry is not synced yet.
    ShowsRecord(KeyDigest),
    /// A completion or an acceptance of a key: synced, and remembered until it is.
    Completes(KeyDigest),
}

impl Visibility {
    fn of(op: &Op) -> Self {
        let digest =
            |key: &idempotency_core::model::ScopedKey| KeyDigest::from_sha256(key.name_digest());
        match op {
            Op::Reserve { key, .. } => Self::ShowsRecord(digest(key)),
            Op::Renew { .. } | Op::Release { .. } | Op::Count | Op::Ping => Self::Written,
            Op::Complete { key, .. } | Op::Accept { key, .. } => Self::Completes(digest(key)),
            Op::Remove { .. } | Op::Get { .. } | Op::Queue(_) => Self::Synced,
        }
    }
}

/// A segment being retired: its puts are coming from the retirer until the last has been
/// applied, then it waits for the entry that moved them on to be synced.
#[derive(Clone, Copy)]
struct Retiring {
    segment: u32,
    synced_by: Option<u64>,
}

struct WriterThread {
    db: Database,
    meta: Meta,
    log: Log,
    state: State,
    /// The last entry written to the log.
    last_seq: u64,
    guard: Guard,
    durability: Arc<Durability>,
    syncer: Option<Syncer>,
    retirer: Option<Retirer>,
    retiring: Option<Retiring>,
    /// A segment that could not be read to retire it: kept, never tried again.
    unreadable: Option<u32>,
    /// Keys completed by entries that may not be synced yet, and the entry of each.
    unsynced_completions: HashMap<KeyDigest, u64>,
    prune_at: usize,
    forgot: Instant,
    /// When the last entry was written.
    appended: Instant,
}

impl WriterThread {
    fn new(start: Start, syncer: Syncer, retirer: Retirer) -> Self {
        Self {
            db: start.db,
            meta: start.meta,
            log: start.log,
            state: start.state,
            last_seq: start.last_seq,
            guard: start.guard,
            durability: start.durability,
            syncer: Some(syncer),
            retirer: Some(retirer),
            retiring: None,
            unreadable: None,
            unsynced_completions: HashMap::new(),
            prune_at: MIN_PRUNE,
            forgot: Instant::now(),
            appended: Instant::now(),
        }
    }

    fn run(mut self, jobs: &Receiver<Msg>) {
        loop {
            let wait = match self.retiring {
                Some(Retiring {
                    synced_by: Some(_), ..
                }) => RETIRE_POLL,
                _ => PURGE_INTERVAL,
            };
            match jobs.recv_timeout(wait) {
                Ok(Msg::Close) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(first) => {
                    let mut closing = false;
                    let mut batch = vec![first];
                    for msg in jobs.try_iter().take(MAX_BATCH - 1) {
                        if let Msg::Close = msg {
                            closing = true;
                            break;
                        }
                        batch.push(msg);
                    }
                    self.commit_batch(batch);
                    self.housekeep();
                    if closing {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.housekeep(),
            }
        }
        self.close();
    }

    fn commit_batch(&mut self, batch: Vec<Msg>) {
        let mut ops = Vec::with_capacity(batch.len());
        let mut chunks = Vec::new();
        for msg in batch {
            match msg {
                Msg::Op(op, reply) => ops.push((op, reply)),
                Msg::Retired(chunk) => chunks.push(chunk),
                Msg::Close => {}
            }
        }
        if let Some(why) = self.durability.failure() {
            return refuse(ops, &format!("the file store stopped writing ({why})"));
        }
        if self.log.head_is_full() {
            if let Err(e) = self.roll() {
                let why = format!("starting a new log segment failed: {e}");
                self.durability.fail(&why);
                return refuse(ops, &why);
            }
        }
        let now = now_millis();
        let (answers, journal) = self.apply(ops, &chunks, now);
        let seq = self.last_seq + 1;
        if !journal.is_empty() {
            if let Err(e) = self.log.append(seq, now, journal.as_bytes()) {
                // Memory holds changes the log lacks: nothing more may be written or read.
                let why = format!("writing the log failed: {e}");
                self.durability.fail(&why);
                let ops = answers.into_iter().map(|(reply, ..)| ((), reply));
                return refuse(ops.collect(), &why);
            }
            self.last_seq = seq;
            self.appended = Instant::now();
            self.durability.written(seq);
        }
        self.chunks_applied(&chunks);
        for (reply, answer, visibility) in answers {
            self.answer(reply, answer, visibility);
        }
        self.prune();
    }

    /// Applies each operation and each retired put in one batch; the answers and the changes.
    #[allow(clippy::type_complexity)]
    fn apply(
        &mut self,
        ops: Vec<(Op, Reply)>,
        chunks: &[Chunk],
        now: u64,
    ) -> (Vec<(Reply, std::io::Result<Answer>, Visibility)>, Journal) {
        let State {
            records,
            queues,
            space,
        } = &mut self.state;
        let mut b = Batch {
            journal: Journal::at(self.log.head(), self.log.payload_at()),
            log: &mut self.log,
            space,
            now,
            guard: self.guard,
        };
        let mut answers = Vec::with_capacity(ops.len());
        for (op, reply) in ops {
            let visibility = Visibility::of(&op);
            let answer = State::apply(records, queues, &mut b, op);
            answers.push((reply, answer, visibility));
        }
        for chunk in chunks.iter().filter(|chunk| !chunk.unreadable) {
            State::retire(records, queues, &mut b, &chunk.items);
        }
        (answers, b.journal)
    }

    fn answer(&mut self, reply: Reply, answer: std::io::Result<Answer>, visibility: Visibility) {
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                let why = format!("file store read failed: {e}");
                let _ = reply.send(Err(StoreError::Unavailable(why)));
                return;
            }
        };
        let wait_for = match (visibility, &answer) {
            (Visibility::Written, _) => None,
            (Visibility::Synced, _) => Some(self.last_seq),
            (Visibility::Completes(key), answer) => {
                if completes(answer) {
                    self.unsynced_completions.insert(key, self.last_seq);
                }
                Some(self.last_seq)
            }
            (Visibility::ShowsRecord(key), Answer::Existing(_)) => {
                self.unsynced_completions.get(&key).copied()
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

    /// Notes the end of a segment's puts: it goes once the entry that moved them on is synced.
    fn chunks_applied(&mut self, chunks: &[Chunk]) {
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

    /// Forgets completions that are synced, when there are enough to be worth the pass.
    fn prune(&mut self) {
        if self.unsynced_completions.len() < self.prune_at {
            return;
        }
        let synced = self.durability.synced();
        self.unsynced_completions.retain(|_, seq| *seq > synced);
        self.prune_at = (2 * self.unsynced_completions.len()).max(MIN_PRUNE);
    }

    /// Syncs the head segment and starts the next.
    fn roll(&mut self) -> std::io::Result<()> {
        self.log.roll()?;
        self.state.space.add_segment(self.log.head());
        self.durability.rolled(self.last_seq, self.log.head_file());
        Ok(())
    }

    /// Between batches, and when idle: deletes a retired segment once what moved on from it is
    /// synced, forgets expired reservations, lets a head go whose records have all expired
    /// (once nothing was written for a while, so that a run of deletes does not start a
    /// segment per batch), starts a retirement.
    fn housekeep(&mut self) {
        if self.durability.failure().is_some() {
            return;
        }
        let now = now_millis();
        if let Some(Retiring {
            segment,
            synced_by: Some(seq),
        }) = self.retiring
        {
            if self.durability.synced() >= seq {
                self.retiring = None;
                match self.log.remove(segment) {
                    Ok(()) => self.state.space.forget(segment),
                    Err(e) => {
                        tracing::error!(segment, error = %e, "file store: cannot delete a retired segment; it is kept, and the log grows behind it");
                        self.unreadable = Some(segment);
                    }
                }
            }
        }
        if self.forgot.elapsed() >= PURGE_INTERVAL {
            self.state.records.forget_expired(now);
            self.forgot = Instant::now();
        }
        let idle = self.appended.elapsed() >= PURGE_INTERVAL;
        if idle && !self.log.head_is_empty() && self.state.space.spent(self.log.head(), now) {
            if let Err(e) = self.roll() {
                self.durability
                    .fail(&format!("starting a new log segment failed: {e}"));
                return;
            }
        }
        if self.retiring.is_none() {
            let oldest = self.state.space.retirable(self.log.head(), now);
            if let Some(segment) = oldest.filter(|oldest| Some(*oldest) != self.unreadable) {
                self.retiring = Some(Retiring {
                    segment,
                    synced_by: None,
                });
                if let Some(retirer) = &self.retirer {
                    retirer.retire(segment);
                }
            }
        }
    }

    /// The head synced, the store file marked closed cleanly.
    fn close(mut self) {
        drop(self.retirer.take());
        let mut clean = self.durability.failure().is_none();
        if clean {
            clean = self.log.head_file().sync_data().is_ok();
            self.durability.reached(self.last_seq);
        }
        if let (true, Some(retiring)) = (clean, self.retiring) {
            if retiring.synced_by.is_some() && self.log.remove(retiring.segment).is_ok() {
                self.state.space.forget(retiring.segment);
            }
        }
        if clean {
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

/// Below this many, remembered completions are not worth a pass to forget.
const MIN_PRUNE: usize = 1024;

fn completes(answer: &Answer) -> bool {
    matches!(answer, Answer::Acquired | Answer::Fenced(Fenced::Applied))
}

fn refuse<T>(ops: Vec<(T, Reply)>, why: &str) {
    for (_, reply) in ops {
        let _ = reply.send(Err(StoreError::Unavailable(why.to_owned())));
    }
}
