//! The retirer thread: reads a segment the writer chose to retire and hands its puts to the
//! writer in chunks, so the writer never waits on the disk for a segment hours old.
//!
//! The writer writes again, at the head of the log, each put that is still the current value
//! of its key or delivery and has not expired, and forgets the expired ones; once those copies
//! are synced, it deletes the segment (`writer.rs`). A crash at any point leaves the segment
//! and, after it in the log, copies that are the same values again: opening replays both and
//! comes to the same state. Deletes are not handed over: the segment is the oldest, so nothing
//! older is left for them to hide.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::change::{Change, Reader};
use super::journal::Loc;
use super::log::segment_path;
use super::segment::{self, HEADER_LEN, MAGIC};
use super::values;
use super::writer::Msg;
use idempotency_core::backend::now_millis;

/// A put of the segment being retired.
#[derive(Debug)]
pub(super) enum Item {
    /// A record; its value only if it had not expired when read.
    Record {
        key: String,
        loc: Loc,
        value: Option<Vec<u8>>,
    },
    Delivery {
        queue: String,
        id: u128,
        loc: Loc,
        value: Vec<u8>,
        dead: bool,
    },
}

/// Part of a segment's puts; the last part of a segment says so.
#[derive(Debug)]
pub(super) struct Chunk {
    pub(super) segment: u32,
    pub(super) items: Vec<Item>,
    pub(super) last: bool,
    /// The segment could not be read: it must be kept, and nothing of it was handed over.
    pub(super) unreadable: bool,
}

/// Items in one chunk: enough to make the writer's part cheap, few enough to keep batches short.
const CHUNK_ITEMS: usize = 1024;

/// The retirer thread; stopped and joined when dropped.
pub(super) struct Retirer {
    jobs: Option<Sender<u32>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Retirer {
    pub(super) fn spawn(dir: PathBuf, writer: Sender<Msg>) -> std::io::Result<Self> {
        let (jobs, received) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("file-store-retirer".into())
            .spawn(move || run(&dir, &received, &writer, &stopping))?;
        Ok(Self {
            jobs: Some(jobs),
            stop,
            thread: Some(thread),
        })
    }

    /// Reads `segment` and hands its puts to the writer.
    pub(super) fn retire(&self, segment: u32) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(segment);
        }
    }
}

impl Drop for Retirer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(dir: &std::path::Path, jobs: &Receiver<u32>, writer: &Sender<Msg>, stop: &AtomicBool) {
    for segment in jobs {
        let read = std::fs::read(segment_path(dir, segment));
        let items = match read.as_deref().map(|file| items(segment, file)) {
            Ok(Some(items)) => items,
            failed => {
                if let Err(e) = failed {
                    tracing::error!(segment, error = %e, "file store: cannot read a segment to retire it; it is kept, and the log grows behind it");
                }
                let chunk = Chunk {
                    segment,
                    items: Vec::new(),
                    last: true,
                    unreadable: true,
                };
                if writer.send(Msg::Retired(chunk)).is_err() {
                    return;
                }
                continue;
            }
        };
        let mut items = items.into_iter().peekable();
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let chunk: Vec<Item> = items.by_ref().take(CHUNK_ITEMS).collect();
            let last = items.peek().is_none();
            let chunk = Chunk {
                segment,
                items: chunk,
                last,
                unreadable: false,
            };
            if writer.send(Msg::Retired(chunk)).is_err() {
                return;
            }
            if last {
                break;
            }
        }
    }
}

/// The puts of every intact entry of a segment file. Damage is reported and passed over: what
/// it hid was already passed over when the store opened, or went bad on the disk since.
fn items(segment: u32, file: &[u8]) -> Option<Vec<Item>> {
    if segment::check_header(file, MAGIC).is_err() {
        tracing::error!(segment, "file store: a segment to retire lost its header; it is kept, and the log grows behind it");
        return None;
    }
    let now = now_millis();
    let mut items = Vec::new();
    let mut from = HEADER_LEN;
    let mut last = None;
    loop {
        let run = segment::run_from(file, from, last);
        for entry in &run.entries {
            puts(
                segment,
                entry.payload_at(),
                entry.payload(file),
                now,
                &mut items,
            );
            last = Some(entry.seq);
        }
        let Some(broken) = run.broken_at else { break };
        tracing::error!(
            segment,
            offset = broken,
            "file store: a segment being retired is damaged; what cannot be read of it is lost"
        );
        match last.and_then(|last| segment::resync(file, broken, last)) {
            Some(next) => from = next,
            None => break,
        }
    }
    Some(items)
}

fn puts(segment: u32, payload_at: u64, payload: &[u8], now: u64, items: &mut Vec<Item>) {
    let mut reader = Reader::new(payload);
    loop {
        let loc = Loc::new(segment, payload_at + (payload.len() - reader.left()) as u64);
        let Ok(Some(change)) = reader.next_change() else {
            return;
        };
        let delivery = |queue: &str, id, value: &[u8], dead| Item::Delivery {
            queue: queue.to_owned(),
            id,
            loc,
            value: value.to_vec(),
            dead,
        };
        items.push(match change {
            Change::RecordPut { key, value } => Item::Record {
                key: key.to_owned(),
                loc,
                value: (values::expiry(value) > now).then(|| value.to_vec()),
            },
            Change::LivePut { queue, id, value } => delivery(queue, id, value, false),
            Change::DeadPut { queue, id, value } => delivery(queue, id, value, true),
            Change::RecordDelete { .. } | Change::LiveDelete { .. } | Change::DeadDelete { .. } => {
                continue
            }
        });
    }
}
