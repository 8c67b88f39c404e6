//! The single writer thread: group commit of every queued write.
//!
//! Callers queue an `Op` with a oneshot for the answer. The thread takes everything waiting (up to
//! `MAX_BATCH`), applies it in one write transaction in arrival order, purges a few expired
//! records, commits once with `Durability::Immediate`, and only then answers. A caller therefore
//! never hears about a write that is not on disk, and a hundred concurrent callers share one
//! fsync instead of queueing for a hundred. While a commit is syncing, new operations pile up in
//! the channel and form the next batch, so batches grow exactly when the load does.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use redb::{Database, Durability};
use tokio::sync::oneshot;

use super::queue::{QueueAnswer, QueueOp, QueueTables};
use super::tables::{self, Tables};
use idempotency_core::model::Record;
use idempotency_core::model::{now_millis, DeliveryId, FencingToken};
use idempotency_core::store::{Fenced, Removal, Removed, StoreError};

/// Bounds one transaction, so a flood of callers still gets answers in steady instalments.
const MAX_BATCH: usize = 512;
/// At least as many as a batch can add, so purging keeps pace with any steady load.
const PURGE_PER_BATCH: usize = 2 * MAX_BATCH;
/// How long the writer waits idle before sweeping expired records on its own.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(1);
/// Records purged per idle sweep transaction; a full sweep is followed at once by another.
const SWEEP_CHUNK: usize = 8192;

/// A write, carrying the encoded record where there is one (with room for its expiry).
pub(super) enum Op {
    Reserve {
        key: String,
        value: Vec<u8>,
        lease: Duration,
    },
    Renew {
        key: String,
        token: FencingToken,
        lease: Duration,
    },
    Complete {
        key: String,
        token: FencingToken,
        value: Vec<u8>,
        ttl: Duration,
    },
    Release {
        key: String,
        token: FencingToken,
    },
    Remove {
        key: String,
        removal: Removal,
    },
    /// Records an inbox acknowledgement and queues its delivery, or finds the key's record.
    Accept {
        key: String,
        value: Vec<u8>,
        ttl: Duration,
        queue: String,
        id: DeliveryId,
        due: u64,
        delivery: Vec<u8>,
    },
    Queue(QueueOp),
}

impl Op {
    fn touches_queues(&self) -> bool {
        matches!(self, Op::Accept { .. } | Op::Queue(_))
    }
}

pub(super) enum Answer {
    Acquired,
    /// `reserve` found a live record: its encoded bytes.
    Existing(Vec<u8>),
    Fenced(Fenced),
    Removed(Removed),
    Queue(QueueAnswer),
}

type Reply = oneshot::Sender<Result<Answer, StoreError>>;

pub(super) struct Writer {
    queue: Option<mpsc::Sender<(Op, Reply)>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    pub(super) fn spawn(db: Arc<Database>) -> std::io::Result<Self> {
        let (queue, jobs) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("file-store-writer".into())
            .spawn(move || run(&db, &jobs))?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
        })
    }

    /// Queues `op` and waits until it is committed (or failed).
    pub(super) async fn submit(&self, op: Op) -> Result<Answer, StoreError> {
        let stopped = || StoreError::Unavailable("the file store writer has stopped".into());
        let (reply, answer) = oneshot::channel();
        let queue = self.queue.as_ref().ok_or_else(stopped)?;
        queue.send((op, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

impl Drop for Writer {
    // Closing the queue lets the thread finish what is queued and exit; waiting for it means the
    // database file is unlocked once the store is gone, so it can be opened again at once.
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(db: &Database, jobs: &Receiver<(Op, Reply)>) {
    let mut wait = PURGE_INTERVAL;
    loop {
        match jobs.recv_timeout(wait) {
            Ok(first) => {
                let batch: Vec<_> = std::iter::once(first)
                    .chain(jobs.try_iter().take(MAX_BATCH - 1))
                    .collect();
                commit_batch(db, batch);
            }
            Err(RecvTimeoutError::Timeout) => {
                // A full chunk means there may be more: sweep again unless work arrives.
                let swept = sweep(db).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "file store: purging expired records failed");
                    0
                });
                wait = if swept == SWEEP_CHUNK {
                    Duration::ZERO
                } else {
                    PURGE_INTERVAL
                };
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn commit_batch(db: &Database, batch: Vec<(Op, Reply)>) {
    let (ops, replies): (Vec<Op>, Vec<Reply>) = batch.into_iter().unzip();
    match apply(db, ops) {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        // Nothing of the batch was committed, so every caller in it hears of the failure.
        Err(e) => {
            let message = format!("file store write failed: {e}");
            for reply in replies {
                let _ = reply.send(Err(StoreError::Unavailable(message.clone())));
            }
        }
    }
}

/// Applies `ops` and a purge in one durable transaction.
fn apply(db: &Database, ops: Vec<Op>) -> Result<Vec<Answer>, redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let now = now_millis();
    let answers = {
        let mut tables = Tables::open(&txn)?;
        // Only a batch with inbox work pays for opening the queue tables.
        let mut queues = None;
        let mut answers = Vec::with_capacity(ops.len());
        for op in ops {
            if op.touches_queues() && queues.is_none() {
                queues = Some(QueueTables::open(&txn)?);
            }
            answers.push(apply_one(&mut tables, queues.as_mut(), op, now)?);
        }
        tables.purge(now, PURGE_PER_BATCH)?;
        answers
    };
    txn.commit()?;
    Ok(answers)
}

fn apply_one(
    tables: &mut Tables<'_>,
    queues: Option<&mut QueueTables<'_>>,
    op: Op,
    now: u64,
) -> Result<Answer, redb::Error> {
    let until =
        |life: Duration| now.saturating_add(life.as_millis().try_into().unwrap_or(u64::MAX));
    let answer = match op {
        Op::Reserve { key, value, lease } => reserve(tables, &key, value, now, until(lease)),
        Op::Renew { key, token, lease } => fenced(tables, &key, token, now, |tables, mut held| {
            tables::stamp(&mut held, until(lease));
            tables.put(&key, &held)
        }),
        Op::Complete {
            key,
            token,
            mut value,
            ttl,
        } => fenced(tables, &key, token, now, |tables, _| {
            tables::stamp(&mut value, until(ttl));
            tables.put(&key, &value)
        }),
        Op::Release { key, token } => fenced(tables, &key, token, now, |t, _| t.delete(&key)),
        Op::Remove { key, removal } => {
            let Some(value) = tables.live(&key, now)? else {
                return Ok(Answer::Removed(Removed::Missing));
            };
            let in_flight = Record::encoded_in_flight(tables::record(&value));
            if in_flight && removal == Removal::CompletedOnly {
                return Ok(Answer::Removed(Removed::KeptInFlight));
            }
            tables.delete(&key)?;
            Ok(Answer::Removed(Removed::Removed))
        }
        Op::Accept {
            key,
            value,
            ttl,
            queue,
            id,
            due,
            delivery,
        } => {
            let answer = reserve(tables, &key, value, now, until(ttl))?;
            if let (Answer::Acquired, Some(queues)) = (&answer, queues) {
                queues.push(&queue, id, due, &delivery)?;
            }
            Ok(answer)
        }
        Op::Queue(op) => match queues {
            Some(queues) => queues.apply(op).map(Answer::Queue),
            None => Err(redb::StorageError::Io(std::io::Error::other(
                "the queue tables were not opened",
            ))),
        },
    };
    Ok(answer?)
}

/// The live record under `key`, or else `value` written there, in the same transaction.
fn reserve(
    tables: &mut Tables<'_>,
    key: &str,
    mut value: Vec<u8>,
    now: u64,
    expiry: u64,
) -> Result<Answer, redb::StorageError> {
    if let Some(existing) = tables.live(key, now)? {
        return Ok(Answer::Existing(tables::record(&existing).to_vec()));
    }
    tables::stamp(&mut value, expiry);
    tables.put(key, &value)?;
    Ok(Answer::Acquired)
}

/// Runs `write` with the held value only if `token` still holds `key`.
fn fenced(
    tables: &mut Tables<'_>,
    key: &str,
    token: FencingToken,
    now: u64,
    write: impl FnOnce(&mut Tables<'_>, Vec<u8>) -> Result<(), redb::StorageError>,
) -> Result<Answer, redb::StorageError> {
    let Some(held) = tables.held_by(key, token, now)? else {
        return Ok(Answer::Fenced(Fenced::LeaseLost));
    };
    write(tables, held)?;
    Ok(Answer::Fenced(Fenced::Applied))
}

/// One idle purge transaction, committed like any other: a purge lost in a crash would only bring
/// back records that count as absent anyway, but a durable commit lets redb reuse the freed pages
/// at once, which is what keeps the file from growing.
fn sweep(db: &Database) -> Result<usize, redb::Error> {
    let txn = db.begin_write()?;
    let swept = Tables::open(&txn)?.purge(now_millis(), SWEEP_CHUNK)?;
    if swept == 0 {
        txn.abort()?;
        return Ok(0);
    }
    txn.commit()?;
    Ok(swept)
}
