//! Where log lines go, and in what form: stderr, as text or JSON; `RUST_LOG` narrows or widens
//! what is logged.
//!
//! Every request logs one line, so the line is written by a thread of its own: a request only
//! formats its line into a queue, and never waits for the stderr lock or makes a `write(2)`.
//! Under a burst the writer catches up in large writes. If the queue (128k lines) is ever full,
//! because whatever reads stderr has stopped, further lines are dropped rather than letting
//! logging stall requests.

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Keeps the writer thread alive; dropping it flushes what is queued, so hold it until exit.
#[must_use = "dropping the guard stops the log writer"]
pub(crate) struct Logging(#[allow(dead_code)] WorkerGuard);

/// Sends log lines to stderr in `format`, through a writer thread.
pub(crate) fn init(format: LogFormat) -> Logging {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: escape codes in a log file are noise to parse.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, guard) = NonBlockingBuilder::default()
        .thread_name("log-writer")
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(writer);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Logging(guard)
}
