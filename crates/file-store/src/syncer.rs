//! The syncer thread: `fdatasync` of the log on a handle of its own, while the writer thread
//! goes on writing the next batches, and the answers that wait for it.
//!
//! This is group commit in the leader/follower shape (RocksDB's write-ahead log, okaywal): the
//! sync runs outside the lock, and when it returns, every entry written before it started is
//! on the disk, so every answer waiting on any of them goes out. A sync never waits for a
//! batch to form: batches form on their own while the previous sync runs.
//!
//! The head segment is the one file with entries not yet synced: the writer syncs a head itself
//! before it moves on to the next (`log.rs`), and hands the syncer the new one.
//!
//! A failed sync poisons the store: after an `fdatasync` error the kernel may have dropped the
//! unwritten pages, so nothing written since can be trusted to be on the disk. Every waiting
//! answer, and every later write and read, is refused until the store is opened again.

use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::batch::{Answer, Reply};
use idempotency_core::StoreError;

/// An answer held back until the log is synced past `seq`.
struct Held {
    seq: u64,
    reply: Reply,
    answer: Answer,
}

struct State {
    /// The last entry handed to the operating system.
    written: u64,
    /// The last entry known to be on the disk.
    synced: u64,
    /// The head segment, where the entries after `synced` are.
    file: Arc<File>,
    held: Vec<Held>,
    failure: Option<String>,
    stopping: bool,
    /// Whether the syncer sleeps for want of entries: only then is it woken (a wake is a
    /// system call, and under load the syncer is syncing, not sleeping).
    idle: bool,
}

/// What the writer and the syncer share about how far the log is on the disk.
pub(super) struct Durability {
    state: Mutex<State>,
    wake: Condvar,
}

impl Durability {
    /// The log is on the disk up to entry `synced`; entries after it go to `head`.
    pub(super) fn new(synced: u64, head: Arc<File>) -> Self {
        Self {
            state: Mutex::new(State {
                written: synced,
                synced,
                file: head,
                held: Vec::new(),
                failure: None,
                stopping: false,
                idle: false,
            }),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The last entry known to be on the disk.
    pub(super) fn synced(&self) -> u64 {
        self.lock().synced
    }

    /// Why the store stopped writing, if it did.
    pub(super) fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// Entry `seq` was handed to the operating system: the syncer may take it.
    pub(super) fn written(&self, seq: u64) {
        let mut state = self.lock();
        state.written = seq;
        if state.idle {
            state.idle = false;
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Sends `answer` once the log is on the disk up to entry `seq` (at once if it is).
    pub(super) fn answer_when_synced(&self, seq: u64, reply: Reply, answer: Answer) {
        let mut state = self.lock();
        if let Some(failure) = &state.failure {
            let _ = reply.send(Err(stopped(failure)));
        } else if seq <= state.synced {
            drop(state);
            let _ = reply.send(Ok(answer));
        } else {
            state.held.push(Held { seq, reply, answer });
        }
    }

    /// The writer synced the head up to entry `seq` itself and moved on to a new head segment.
    pub(super) fn rolled(&self, seq: u64, head: Arc<File>) {
        self.lock().file = head;
        self.reached(seq);
    }

    /// Everything up to entry `seq` is on the disk.
    pub(super) fn reached(&self, seq: u64) {
        let released = {
            let mut state = self.lock();
            state.synced = state.synced.max(seq);
            state.written = state.written.max(seq);
            take_synced(&mut state)
        };
        for held in released {
            let _ = held.reply.send(Ok(held.answer));
        }
    }

    /// The store can no longer write: every held answer and every later one is refused.
    pub(super) fn fail(&self, why: &str) {
        let held = {
            let mut state = self.lock();
            state.failure.get_or_insert_with(|| why.to_owned());
            std::mem::take(&mut state.held)
        };
        for held in held {
            let _ = held.reply.send(Err(stopped(why)));
        }
    }
}

fn take_synced(state: &mut State) -> Vec<Held> {
    let synced = state.synced;
    let (released, held) = std::mem::take(&mut state.held)
        .into_iter()
        .partition(|held| held.seq <= synced);
    state.held = held;
    released
}

fn stopped(why: &str) -> StoreError {
    StoreError::unavailable(format!(
        "the file store stopped writing after a failure ({why}); restart the proxy"
    ))
}

/// The syncer thread, stopped and joined when dropped.
pub(super) struct Syncer {
    durability: Arc<Durability>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    pub(super) fn spawn(durability: Arc<Durability>) -> std::io::Result<Self> {
        let shared = durability.clone();
        let thread = std::thread::Builder::new()
            .name("file-store-syncer".into())
            .spawn(move || run(&shared))?;
        Ok(Self {
            durability,
            thread: Some(thread),
        })
    }
}

impl Drop for Syncer {
    // Whatever was written is synced before the thread stops.
    fn drop(&mut self) {
        self.durability.lock().stopping = true;
        self.durability.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(durability: &Durability) {
    loop {
        let (target, log) = {
            let mut state = durability.lock();
            while state.written <= state.synced && !state.stopping && state.failure.is_none() {
                state.idle = true;
                state = durability
                    .wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            state.idle = false;
            if state.failure.is_some() || state.written <= state.synced {
                return;
            }
            (state.written, state.file.clone())
        };
        if let Err(e) = log.sync_data() {
            durability.fail(&format!("syncing the log failed: {e}"));
            return;
        }
        durability.reached(target);
    }
}
