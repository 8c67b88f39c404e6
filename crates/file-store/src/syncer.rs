//! The syncer thread: `fdatasync` of the log on a handle of its own, while the writer thread
//! goes on writing the next batches, and the answers that wait for it.
//!
//! This is group commit in the leader/follower shape (RocksDB's write-ahead log, okaywal): the
//! sync runs outside the lock, and when it returns, every entry written before it started is
//! on the disk, so every answer waiting on any of them goes out. A sync never waits for a
//! batch to form: batches form on their own while the previous sync runs.
//!
//! A failed sync poisons the store: after an `fdatasync` error the kernel may have dropped the
//! unwritten pages, so nothing written since can be trusted to be on the disk. Every waiting
//! answer, and every later write and read, is refused until the store is opened again.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::batch::{Answer, Reply};
use idempotency_core::store::StoreError;

/// An answer held back until the log is synced past `seq`.
struct Held {
    seq: u64,
    reply: Reply,
    answer: Answer,
}

#[derive(Default)]
struct State {
    /// The last entry handed to the operating system.
    written: u64,
    /// The last entry known to be on the disk.
    synced: u64,
    held: Vec<Held>,
    failure: Option<String>,
    stopping: bool,
}

/// What the writer, the syncer and the readers share about how far the log is on the disk.
pub(super) struct Durability {
    state: Mutex<State>,
    wake: Condvar,
    /// The last entry whose batch was applied to the tables: an upper bound on what a read
    /// transaction begun after loading it can see.
    applied: AtomicU64,
    /// `synced` (or the failure) for readers that wait on it without blocking a thread.
    published: watch::Sender<Result<u64, String>>,
}

impl Durability {
    pub(super) fn new(synced: u64) -> Self {
        Self {
            state: Mutex::new(State {
                written: synced,
                synced,
                ..State::default()
            }),
            wake: Condvar::new(),
            applied: AtomicU64::new(synced),
            published: watch::Sender::new(Ok(synced)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The writer is about to make the batch of entry `seq` visible to readers.
    pub(super) fn applying(&self, seq: u64) {
        self.applied.store(seq, Ordering::SeqCst);
    }

    pub(super) fn applied(&self) -> u64 {
        self.applied.load(Ordering::SeqCst)
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
        self.lock().written = seq;
        self.wake.notify_one();
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

    /// Everything up to entry `seq` is on the disk by other means (a durable checkpoint).
    pub(super) fn reached(&self, seq: u64) {
        let released = {
            let mut state = self.lock();
            state.synced = state.synced.max(seq);
            state.written = state.written.max(seq);
            take_synced(&mut state)
        };
        self.release(released, Ok(seq));
    }

    /// The store can no longer write: every held answer and every later one is refused.
    pub(super) fn fail(&self, why: String) {
        let held = {
            let mut state = self.lock();
            state.failure.get_or_insert(why.clone());
            std::mem::take(&mut state.held)
        };
        for held in held {
            let _ = held.reply.send(Err(stopped(&why)));
        }
        let _previous = self.published.send_replace(Err(why));
    }

    fn release(&self, released: Vec<Held>, published: Result<u64, String>) {
        for held in released {
            let _ = held.reply.send(Ok(held.answer));
        }
        self.published.send_if_modified(|current| {
            let newer = matches!((&*current, &published), (Ok(old), Ok(new)) if new > old);
            if newer {
                *current = published;
            }
            newer
        });
    }

    /// Waits, without blocking a thread, until the log is on the disk up to entry `seq`.
    pub(super) async fn wait_synced(&self, seq: u64) -> Result<(), StoreError> {
        let mut synced = self.published.subscribe();
        let reached = synced
            .wait_for(|synced| synced.as_ref().map_or(true, |synced| *synced >= seq))
            .await;
        match reached.as_deref() {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(why)) => Err(stopped(why)),
            Err(_) => Err(StoreError::Unavailable("the file store has closed".into())),
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
    StoreError::Unavailable(format!(
        "the file store stopped writing after a failure ({why}); restart the proxy"
    ))
}

/// The syncer thread, stopped and joined when dropped.
pub(super) struct Syncer {
    durability: Arc<Durability>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    pub(super) fn spawn(durability: Arc<Durability>, log: File) -> std::io::Result<Self> {
        let shared = durability.clone();
        let thread = std::thread::Builder::new()
            .name("file-store-syncer".into())
            .spawn(move || run(&shared, &log))?;
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

fn run(durability: &Durability, log: &File) {
    loop {
        let target = {
            let mut state = durability.lock();
            while state.written <= state.synced && !state.stopping && state.failure.is_none() {
                state = durability
                    .wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if state.failure.is_some() || state.written <= state.synced {
                return;
            }
            state.written
        };
        if let Err(e) = log.sync_data() {
            durability.fail(format!("syncing the write-ahead log failed: {e}"));
            return;
        }
        durability.reached(target);
    }
}
