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
//! Between batches it keeps the log's size in hand (`housekeeping.rs`): a new head segment, a
//! retirement of the oldest, whose puts come back from the retirer thread as messages applied
//! in a batch like any operation.

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
use super::housekeeping::Retiring;
use super::index::KeyDigest;
use super::journal::Journal;
use super::log::Log;
use super::meta::Meta;
use super::retire::{Chunk, Retirer};
use super::state::State;
use super::syncer::{Durability, Syncer};
use idempotency_core::backend::now_millis;
use idempotency_core::{backend::Fenced, StoreError};

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
        let stopped = || StoreError::unavailable("the file store writer has stopped");
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
            |key: &idempotency_core::backend::ScopedKey| KeyDigest::from_sha256(key.name_digest());
        match op {
            Op::Reserve { key, .. } => Self::ShowsRecord(digest(key)),
            Op::Renew { .. } | Op::Release { .. } | Op::Count | Op::Ping => Self::Written,
            Op::Complete { key, .. } | Op::Accept { key, .. } => Self::Completes(digest(key)),
            Op::Remove { .. } | Op::Get { .. } | Op::Queue(_) => Self::Synced,
        }
    }
}

pub(super) struct WriterThread {
    pub(super) db: Database,
    pub(super) meta: Meta,
    pub(super) log: Log,
    pub(super) state: State,
    /// The last entry written to the log.
    pub(super) last_seq: u64,
    pub(super) guard: Guard,
    pub(super) durability: Arc<Durability>,
    pub(super) syncer: Option<Syncer>,
    pub(super) retirer: Option<Retirer>,
    pub(super) retiring: Option<Retiring>,
    /// A segment that could not be read to retire it: kept, never tried again.
    pub(super) unreadable: Option<u32>,
    /// Keys completed by entries that may not be synced yet, and the entry of each.
    pub(super) unsynced_completions: HashMap<KeyDigest, u64>,
    pub(super) prune_at: usize,
    pub(super) forgot: Instant,
    /// When the last entry was written.
    pub(super) appended: Instant,
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
                let failed = StoreError::unavailable_from("file store read failed", e);
                let _ = reply.send(Err(failed));
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

    /// Forgets completions that are synced, when there are enough to be worth the pass.
    fn prune(&mut self) {
        if self.unsynced_completions.len() < self.prune_at {
            return;
        }
        let synced = self.durability.synced();
        self.unsynced_completions.retain(|_, seq| *seq > synced);
        self.prune_at = (2 * self.unsynced_completions.len()).max(MIN_PRUNE);
    }
}

/// Below this many, remembered completions are not worth a pass to forget.
const MIN_PRUNE: usize = 1024;

fn completes(answer: &Answer) -> bool {
    matches!(answer, Answer::Acquired | Answer::Fenced(Fenced::Applied))
}

fn refuse<T>(ops: Vec<(T, Reply)>, why: &str) {
    for (_, reply) in ops {
        // One failure answers many requests, and an io::Error cannot be copied: each gets its
        // words.
        let _ = reply.send(Err(StoreError::unavailable(why.to_owned())));
    }
}
