//! Where log lines go, and in what form: stderr, as text or JSON; `RUST_LOG` narrows or widens
//! what is logged. Text lines are written by [`text::TextLine`], which spares them the general
//! formatter's cost; the line every request logs ([`RequestLine`]) is written straight from its
//! fields when the text log is in place, without a tracing event.
//!
//! Every request logs one line, so lines are written in batches: a request appends its line to
//! a shared buffer (a copy under a lock held for that copy), and a thread of its own writes the
//! buffer out every [`FLUSH_EVERY`], or at once when it passes [`FLUSH_AT`]. A request never
//! makes a `write(2)`, never waits for stderr, and never wakes another thread for its line.
//! If the buffer ever reaches [`DROP_AT`] (whatever reads stderr has stopped), further lines
//! are dropped, and counted in a line of their own, rather than letting logging stall requests
//! or grow without bound.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

#[cfg(test)]
mod captured;
mod request_line;
mod text;

pub(crate) use request_line::RequestLine;

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
        request_line::write_directly_to(move |line| lines.append(line));
    }
    logging
}

/// The buffer lines are appended to, shared by every thread and the writer.
#[derive(Default)]
struct Shared {
    buffer: Mutex<Vec<u8>>,
    dropped: AtomicU64,
    stopping: AtomicBool,
}

/// Where log lines are appended; tracing's formatter writes each line to it in one call.
#[derive(Clone)]
struct Batched {
    shared: Arc<Shared>,
    writer: Thread,
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
        (Self { shared, writer }, logging)
    }
}

impl Batched {
    /// Appends one whole line (or several) for the writer thread.
    fn append(&self, line: &[u8]) {
        let mut buffer = self
            .shared
            .buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if buffer.len() >= DROP_AT {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        buffer.extend_from_slice(line);
        let full = buffer.len() >= FLUSH_AT;
        drop(buffer);
        if full {
            self.writer.unpark();
        }
    }
}

impl Write for Batched {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.append(line);
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
}

/// The writer thread: takes the buffer whole, and writes it out, until told to stop.
fn write_until_stopped(shared: &Shared, out: &mut impl Write) {
    let mut spare = Vec::new();
    loop {
        let stopping = shared.stopping.load(Ordering::Acquire);
        let lines = {
            let mut buffer = shared.buffer.lock().unwrap_or_else(PoisonError::into_inner);
            std::mem::swap(&mut *buffer, &mut spare);
            std::mem::take(&mut spare)
        };
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

    #[test]
    fn lines_are_written_whole_and_in_order_by_the_writer() {
        let shared = Shared::default();
        let mut lines = Vec::new();
        for n in 0..1000 {
            lines.extend_from_slice(format!("line {n}\n").as_bytes());
        }
        shared.buffer.lock().unwrap().extend_from_slice(&lines);
        shared.stopping.store(true, Ordering::Release);
        let mut out = Vec::new();
        write_until_stopped(&shared, &mut out);
        assert_eq!(out, lines);
    }

    #[test]
    fn a_full_buffer_drops_lines_and_says_how_many() {
        let mut lines = Batched {
            shared: Arc::default(),
            writer: thread::current(),
        };
        lines.write_all(b"kept\n").unwrap();
        lines.shared.buffer.lock().unwrap().resize(DROP_AT, b'.');
        lines.write_all(b"one too many\n").unwrap();
        assert_eq!(lines.shared.dropped.load(Ordering::Relaxed), 1);
        let mut out = Vec::new();
        lines.shared.stopping.store(true, Ordering::Release);
        write_until_stopped(&lines.shared, &mut out);
        assert!(out.starts_with(b"kept\n"));
        assert!(out.ends_with(b"log writer: 1 lines dropped, stderr was not being read\n"));
    }
}
