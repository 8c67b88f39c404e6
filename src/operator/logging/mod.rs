//! Where log lines go, and in what form: stderr, as text or JSON; `RUST_LOG` narrows or widens
//! what is logged. Text lines are written by [`text::TextLine`], which spares them the general
//! formatter's cost; the line every request logs ([`RequestLine`]) is written straight from its
//! fields when the text log is in place, without a tracing event.
//!
//! Every request logs one line, so access lines (a request's, a delivery attempt's) are written
//! in batches: a request appends its line to a shared buffer (a copy under a lock held for that
//! copy), and a thread of its own writes the buffer out every [`FLUSH_EVERY`], or at once when
//! it passes [`FLUSH_AT`]. A request never makes a `write(2)`, never waits for stderr, and never
//! wakes another thread for its line; a SIGKILL loses at most the last [`FLUSH_EVERY`] of them
//! (a drain writes out every one).
//!
//! Every other line (a warning, an error, a reload's) explains something a client or an
//! operator is about to be answered, and is out before that answer: it goes through the same
//! buffer, in order, and the call that logs it waits for the writer to have written it, at most
//! [`OUT_WITHIN`]. A writer that takes longer has a stalled stderr; lines are not waited for
//! again until it writes something.
//!
//! If the buffer ever reaches [`DROP_AT`] (whatever reads stderr has stopped), further lines
//! are dropped, and counted in a line of their own, rather than letting logging stall requests
//! or grow without bound.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use tracing::Metadata;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

#[cfg(test)]
mod captured;
mod request_line;
mod text;

pub(crate) use request_line::RequestLine;

/// The target of the line each delivery attempt logs, an access line like a request's.
pub(crate) const DELIVERY_LINE_TARGET: &str = "idempotency_proxy::inbox::metrics";

/// How log lines are written (`--log-format`, `log_format`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// How long a line may wait in the buffer.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// A buffer this full is written out at once.
const FLUSH_AT: usize = 256 * 1024;
/// A buffer this full takes no more lines.
const DROP_AT: usize = 16 * 1024 * 1024;
/// How long a line that must be out before its answer waits for the writer.
const OUT_WITHIN: Duration = Duration::from_secs(1);

/// Sends log lines to stderr in `format`, through a writer thread. Hold the returned guard
/// until exit: dropping it writes out what is buffered.
pub(crate) fn init(format: LogFormat) -> Logging {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: escape codes in a log file are noise to parse.
    let colours = io::IsTerminal::is_terminal(&io::stderr());
    let (lines, logging) = Batched::start();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(lines.clone());
    let installed = match format {
        LogFormat::Text => builder.event_format(text::TextLine::default()).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    if installed.is_ok() && format == LogFormat::Text && !colours {
        request_line::write_directly_to(move |line| {
            lines.append(line);
        });
    }
    logging
}

/// The buffer lines are appended to, shared by every thread and the writer, and how far the
/// writer has written.
#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    written: Mutex<Written>,
    /// Signalled each time the writer has written out the buffer.
    wrote: Condvar,
    dropped: AtomicU64,
    stopping: AtomicBool,
}

#[derive(Default)]
struct Pending {
    lines: Vec<u8>,
    /// Bytes appended since the start: where each line ends, in the order of the output.
    appended: u64,
}

#[derive(Default)]
struct Written {
    /// Bytes written out since the start.
    upto: u64,
    /// A line waited for [`OUT_WITHIN`] in vain since the writer last wrote.
    stalled: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each value is changed whole under its lock, so a poisoned one is still consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Takes the buffer whole (leaving `spare` in its place), with where it ends.
    fn take(&self, spare: &mut Vec<u8>) -> (Vec<u8>, u64) {
        let mut pending = lock(&self.pending);
        std::mem::swap(&mut pending.lines, spare);
        (std::mem::take(spare), pending.appended)
    }

    /// The writer has written out everything up to `upto`.
    fn written(&self, upto: u64) {
        let mut written = lock(&self.written);
        *written = Written {
            upto,
            stalled: false,
        };
        drop(written);
        self.wrote.notify_all();
    }

    /// Waits until the writer has written out everything up to `end`, at most
    /// [`OUT_WITHIN`], and not at all while it is stalled.
    fn wait_written(&self, end: u64) {
        let written = lock(&self.written);
        if written.stalled {
            return;
        }
        let waited = self
            .wrote
            .wait_timeout_while(written, OUT_WITHIN, |w| w.upto < end);
        let (mut written, waited) = waited.unwrap_or_else(PoisonError::into_inner);
        if waited.timed_out() && written.upto < end {
            written.stalled = true;
        }
    }
}

/// Where log lines are appended; tracing's formatter writes each line to it in one call.
#[derive(Clone)]
struct Batched {
    shared: Arc<Shared>,
    writer: Thread,
    /// Whether a line is waited for until it is written out, rather than batched.
    at_once: bool,
}

impl Batched {
    fn start() -> (Self, Logging) {
        let shared = Arc::new(Shared::default());
        let drained = shared.clone();
        let thread = thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || write_until_stopped(&drained, &mut io::stderr()))
            .expect("a thread for the log writer");
        let writer = thread.thread().clone();
        let logging = Logging {
            shared: shared.clone(),
            thread: Some(thread),
        };
        let lines = Self {
            shared,
            writer,
            at_once: false,
        };
        (lines, logging)
    }

    /// Appends one whole line (or several) for the writer thread; returns where it ends in
    /// the output, or `None` if it was dropped.
    fn append(&self, line: &[u8]) -> Option<u64> {
        let mut pending = lock(&self.shared.pending);
        if pending.lines.len() >= DROP_AT {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        pending.lines.extend_from_slice(line);
        pending.appended += line.len() as u64;
        let (full, end) = (pending.lines.len() >= FLUSH_AT, pending.appended);
        drop(pending);
        if full || self.at_once {
            self.writer.unpark();
        }
        Some(end)
    }
}

impl Write for Batched {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let end = self.append(line);
        if let Some(end) = end.filter(|_| self.at_once) {
            self.shared.wait_written(end);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Batched;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }

    /// Access lines are batched; every other line is out before the call that logs it returns.
    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        let access = [
            request_line::TARGET,
            DELIVERY_LINE_TARGET,
            idempotency_outbox::ATTEMPT_LINE_TARGET,
        ]
        .contains(&meta.target());
        Batched {
            at_once: !access,
            ..self.clone()
        }
    }
}

/// The writer thread: takes the buffer whole, and writes it out, until told to stop.
fn write_until_stopped(shared: &Shared, out: &mut impl Write) {
    let mut spare = Vec::new();
    loop {
        let stopping = shared.stopping.load(Ordering::Acquire);
        let (lines, upto) = shared.take(&mut spare);
        if !lines.is_empty() {
            let _ = out.write_all(&lines);
        }
        let dropped = shared.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = writeln!(
                out,
                "log writer: {dropped} lines dropped, stderr was not being read"
            );
        }
        shared.written(upto);
        spare = lines;
        spare.clear();
        if stopping {
            let _ = out.flush();
            return;
        }
        thread::park_timeout(FLUSH_EVERY);
    }
}

/// Keeps the log writer running; dropping it writes out what is buffered and stops it.
#[must_use = "dropping the guard stops the log writer"]
pub(crate) struct Logging {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Logging {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use captured::Captured;

    /// Lines with no writer thread to write them out.
    fn unwritten(at_once: bool) -> Batched {
        Batched {
            shared: Arc::default(),
            writer: thread::current(),
            at_once,
        }
    }

    #[test]
    fn lines_are_written_whole_and_in_order_by_the_writer() {
        let shared = Shared::default();
        let mut lines = Vec::new();
        for n in 0..1000 {
            lines.extend_from_slice(format!("line {n}\n").as_bytes());
        }
        shared
            .pending
            .lock()
            .unwrap()
            .lines
            .extend_from_slice(&lines);
        shared.stopping.store(true, Ordering::Release);
        let mut out = Vec::new();
        write_until_stopped(&shared, &mut out);
        assert_eq!(out, lines);
    }

    #[test]
    fn a_line_written_at_once_is_out_when_the_call_returns_after_the_lines_before_it() {
        let shared = Arc::new(Shared::default());
        let out = Captured::default();
        let (drained, mut written) = (shared.clone(), out.clone());
        let thread = thread::spawn(move || write_until_stopped(&drained, &mut written));
        let batched = Batched {
            shared,
            writer: thread.thread().clone(),
            at_once: false,
        };
        batched.clone().write_all(b"access\n").unwrap();
        let mut at_once = Batched {
            at_once: true,
            ..batched.clone()
        };
        at_once.write_all(b"warning\n").unwrap();
        assert_eq!(out.text(), "access\nwarning\n");
        batched.shared.stopping.store(true, Ordering::Release);
        batched.writer.unpark();
        thread.join().unwrap();
    }

    #[test]
    fn a_stalled_writer_is_waited_for_once_until_it_writes_again() {
        let mut lines = unwritten(true);
        lines.write_all(b"one\n").unwrap();
        assert!(lock(&lines.shared.written).stalled);
        lines.write_all(b"two\n").unwrap();
        let mut out = Vec::new();
        lines.shared.stopping.store(true, Ordering::Release);
        write_until_stopped(&lines.shared, &mut out);
        assert_eq!(out, b"one\ntwo\n");
        assert!(!lock(&lines.shared.written).stalled);
    }

    #[test]
    fn a_full_buffer_drops_lines_and_says_how_many() {
        let mut lines = unwritten(false);
        lines.write_all(b"kept\n").unwrap();
        lines
            .shared
            .pending
            .lock()
            .unwrap()
            .lines
            .resize(DROP_AT, b'.');
        lines.write_all(b"one too many\n").unwrap();
        assert_eq!(lines.shared.dropped.load(Ordering::Relaxed), 1);
        let mut out = Vec::new();
        lines.shared.stopping.store(true, Ordering::Release);
        write_until_stopped(&lines.shared, &mut out);
        assert!(out.starts_with(b"kept\n"));
        assert!(out.ends_with(b"log writer: 1 lines dropped, stderr was not being read\n"));
    }
}
