//! The line every request logs, written straight into the line buffer.
//!
//! The line is the `request` event of [`TARGET`], and reads the same whichever way it is
//! written. When the proxy's own text log is in place (no colours), [`RequestLine::log`] writes
//! it from its typed fields: the event path spent about 2,700 instructions per request, most of
//! them in tracing's dispatch and in visiting each field through a trait object, against about
//! 1,300 written directly, the append to the line buffer included. Anywhere else (the JSON
//! format, colours on a terminal, a subscriber an embedding application installed) it is logged
//! as the tracing event it always was.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use tracing::Level;

use super::text::{line_head, quoted_str, with_line, write_f64};

/// The target the request line is logged under, as before it had a writer of its own.
pub(super) const TARGET: &str = "idempotency_proxy::telemetry";

/// Where request lines are appended without a tracing event: set when the proxy's own text
/// subscriber, which would write them the same way, is the one in place.
static DIRECT: OnceLock<Box<Append>> = OnceLock::new();

/// What takes a whole line for the log writer.
type Append = dyn Fn(&[u8]) + Send + Sync;

/// From now on, request lines go to `append` as whole lines, not through tracing.
pub(super) fn write_directly_to(append: impl Fn(&[u8]) + Send + Sync + 'static) {
    let _ = DIRECT.set(Box::new(append));
}

/// Whether request lines are written directly.
#[cfg(test)]
fn written_directly() -> bool {
    DIRECT.get().is_some()
}

/// What one request's line says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestLine<'a> {
    pub(crate) route: &'a str,
    pub(crate) outcome: &'static str,
    pub(crate) status: u16,
    /// On a gRPC route, the call's `grpc-status` where it is known.
    pub(crate) grpc_status: Option<u32>,
    pub(crate) latency: Duration,
    /// The scoped key's short digest; `-` for a request without a key.
    pub(crate) key: &'a str,
    /// The problem type the proxy answered with, if it answered one.
    pub(crate) problem: Option<&'static str>,
    /// Why the upstream call failed, if it did.
    pub(crate) cause: Option<&'a str>,
}

impl RequestLine<'_> {
    /// Logs the line at `INFO`, if `RUST_LOG` lets it through.
    pub(crate) fn log(&self) {
        if !tracing::enabled!(target: TARGET, Level::INFO) {
            return;
        }
        match DIRECT.get() {
            Some(append) => {
                let written = with_line(|line| {
                    self.write(line, SystemTime::now())
                        .then(|| append(line.as_bytes()))
                });
                if written.is_none() {
                    self.event();
                }
            }
            None => self.event(),
        }
    }

    /// The line as a tracing event, for any subscriber.
    fn event(&self) {
        tracing::info!(
            target: TARGET,
            route = self.route,
            outcome = self.outcome,
            status = self.status,
            grpc_status = self.grpc_status,
            // In whole microseconds, which the text log writes without the float formatter.
            latency_ms = self.latency.as_micros() as f64 / 1000.0,
            key = self.key,
            problem = self.problem,
            cause = self.cause,
            "request"
        );
    }

    /// Writes the line as the text format writes [`event`](Self::event), or returns false
    /// for a time the text format writes differently.
    fn write(&self, line: &mut String, now: SystemTime) -> bool {
        if !line_head(line, now, Level::INFO, TARGET) {
            return false;
        }
        line.push_str("request route=");
        quoted_str(line, self.route);
        line.push_str(" outcome=");
        quoted_str(line, self.outcome);
        line.push_str(" status=");
        line.push_str(itoa::Buffer::new().format(self.status));
        if let Some(code) = self.grpc_status {
            line.push_str(" grpc_status=");
            line.push_str(itoa::Buffer::new().format(code));
        }
        line.push_str(" latency_ms=");
        write_f64(line, self.latency.as_micros() as f64 / 1000.0);
        line.push_str(" key=");
        quoted_str(line, self.key);
        if let Some(problem) = self.problem {
            line.push_str(" problem=");
            quoted_str(line, problem);
        }
        if let Some(cause) = self.cause {
            line.push_str(" cause=");
            quoted_str(line, cause);
        }
        line.push('\n');
        true
    }
}

#[cfg(test)]
#[path = "request_line_tests.rs"]
mod tests;
