//! Where log lines go, and in what form: stderr, as text or JSON; `RUST_LOG` narrows or widens
//! what is logged.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Sends log lines to stderr in `format`.
pub(crate) fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: escape codes in a log file are noise to parse.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
