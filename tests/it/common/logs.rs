//! The in-process proxy's log lines, kept for a test to read, as an operator reads the binary's
//! stderr.
//!
//! The subscriber is the test thread's own (`tracing::subscriber::set_default`), so tests that
//! run at once in one binary never read each other's lines. That holds because `#[tokio::test]`
//! runs the test, and every task the proxy spawns, on the test's thread: on a multi-threaded
//! runtime the lines would go elsewhere, and a test waiting for one fails for want of it.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::MakeWriter;

use super::poll;

/// What a line the proxy logs (at `debug`) holds when a client it has taken off the listen queue
/// waits for a connection slot, `open` connections being served: the check of the limit was
/// made, and held the client back.
pub(crate) fn slot_wait(open: usize) -> String {
    format!("a client waits for a slot open={open} ")
}

/// What the proxy logs at `debug` and above while this is held.
pub(crate) struct Logs {
    written: Written,
    _default: DefaultGuard,
}

impl Logs {
    /// Keeps the proxy's lines from now on, until dropped.
    pub(crate) fn capture() -> Self {
        let written = Written::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("idempotency_proxy=debug")
            .with_ansi(false)
            .with_writer(written.clone())
            .finish();
        let default = tracing::subscriber::set_default(subscriber);
        Self {
            written,
            _default: default,
        }
    }

    /// How many lines hold `text`, now.
    pub(crate) fn count(&self, text: &str) -> usize {
        let bytes = self
            .written
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let log = String::from_utf8_lossy(&bytes);
        log.lines().filter(|line| line.contains(text)).count()
    }

    /// Waits until more than `before` lines hold `text`.
    pub(crate) async fn until_more(&self, text: &str, before: usize) {
        let logged = async || self.count(text) > before;
        let what = format!("a line with {text:?} after the {before} there were");
        poll::until(Duration::from_secs(30), what, logged).await;
    }
}

/// Every byte the subscriber wrote.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl io::Write for Written {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut written = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        written.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Written {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}
