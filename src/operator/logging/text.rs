//! The text log line, written straight into the line buffer.
//!
//! tracing-subscriber's general formatter spends more on a line than the proxy spends forwarding a
//! request's headers: it renders the timestamp field by field through `fmt`, wraps every part in a
//! style even when colours are off, and escapes each string character by character. That matters
//! for lines that come per request: the request line, which `request_line.rs` writes with this
//! file's pieces, and the warnings of requests whose store or upstream fails, which come as fast as
//! requests do while a fault lasts. [`TextLine`] writes the same line (byte for byte, which the
//! tests check against the general formatter) with the timestamp's date and time cached per second
//! and plain strings copied whole. Anything it does not write the same way (spans, colours, errors,
//! control characters, events forwarded from the `log` crate) goes to the general formatter.

use std::cell::RefCell;
use std::fmt::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::time::SystemTime as SystemClock;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The text format of `--log-format text`: tracing-subscriber's full format, without colours
/// when stderr is not a terminal.
#[derive(Debug, Default)]
pub(super) struct TextLine {
    general: Format<Full, SystemClock>,
}

impl<S, N> FormatEvent<S, N> for TextLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if writer.has_ansi_escapes() || ctx.event_scope().is_some() {
            return self.general.format_event(ctx, writer, event);
        }
        let written = with_line(|line| {
            plain_line(line, SystemTime::now(), event).then(|| writer.write_str(line))
        });
        match written {
            Some(result) => result,
            None => self.general.format_event(ctx, writer, event),
        }
    }
}

thread_local! {
    /// One line's text, reused: the line is built here first so that an event the fast path
    /// cannot write is handed to the general formatter with nothing written yet.
    static LINE: RefCell<String> = const { RefCell::new(String::new()) };
    /// The last second written, and its `YYYY-MM-DDTHH:MM:SS.`.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Runs `write` on this thread's line buffer, emptied first.
pub(super) fn with_line<T>(write: impl FnOnce(&mut String) -> Option<T>) -> Option<T> {
    LINE.with_borrow_mut(|line| {
        line.clear();
        write(line)
    })
}

/// Writes the whole line, or returns false if the event needs the general formatter.
fn plain_line(line: &mut String, now: SystemTime, event: &Event<'_>) -> bool {
    let meta = event.metadata();
    if !line_head(line, now, *meta.level(), meta.target()) {
        return false;
    }
    let mut fields = PlainFields {
        line,
        empty: true,
        plain: true,
    };
    event.record(&mut fields);
    let plain = fields.plain;
    line.push('\n');
    plain
}

/// What comes before a line's fields: `2026-11-30T17:04:32.123456Z  INFO target: `; false
/// for a time the general formatter writes differently.
pub(super) fn line_head(line: &mut String, now: SystemTime, level: Level, target: &str) -> bool {
    if !timestamp(line, now) {
        return false;
    }
    line.push(' ');
    line.push_str(level_text(level));
    line.push(' ');
    line.push_str(target);
    line.push_str(": ");
    true
}

fn level_text(level: Level) -> &'static str {
    match level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// `2026-11-30T17:04:32.123456Z`, as tracing-subscriber's `SystemTime` writes it; false for a
/// time before 1970 or past 9999, which it writes differently.
fn timestamp(line: &mut String, now: SystemTime) -> bool {
    let Ok(since_epoch) = now.duration_since(UNIX_EPOCH) else {
        return false;
    };
    let seconds = since_epoch.as_secs();
    let fits = SECOND.with_borrow_mut(|(cached, text)| {
        if *cached != seconds {
            text.clear();
            if !date_and_time(text, seconds) {
                *cached = u64::MAX;
                return false;
            }
            *cached = seconds;
        }
        line.push_str(text);
        true
    });
    if fits {
        micros(line, since_epoch.subsec_micros());
    }
    fits
}

/// `042137Z`: the microseconds as `{:06}` writes them, without the formatting machinery
/// (a third of the line's cost went to this one field).
fn micros(line: &mut String, micros: u32) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(micros);
    for _ in digits.len()..6 {
        line.push('0');
    }
    line.push_str(digits);
    line.push('Z');
}

/// `YYYY-MM-DDTHH:MM:SS.` of a time in seconds since 1970 (UTC, proleptic Gregorian).
fn date_and_time(text: &mut String, seconds: u64) -> bool {
    let days = seconds / 86_400;
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        return false;
    }
    let (hour, minute, second) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    write!(
        text,
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}."
    )
    .is_ok()
}

/// The calendar date of a day counted from 1970-01-01: Howard Hinnant's `civil_from_days`,
/// which counts in 400-year eras starting on March 1st so that leap days fall at an era's end.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Writes fields as tracing-subscriber's default field formatter does: the message first as
/// it is, then `name=value` with `Debug` values, separated by spaces.
struct PlainFields<'a> {
    line: &'a mut String,
    empty: bool,
    /// Cleared by anything this writer does not write the general formatter's way.
    plain: bool,
}

impl PlainFields<'_> {
    fn name(&mut self, field: &Field) -> bool {
        let name = field.name();
        if name.starts_with("log.") {
            self.plain = false;
        }
        if !self.plain {
            return false;
        }
        self.pad();
        if name != "message" {
            self.line.push_str(name.strip_prefix("r#").unwrap_or(name));
            self.line.push('=');
        }
        true
    }

    fn pad(&mut self) {
        if !std::mem::take(&mut self.empty) {
            self.line.push(' ');
        }
    }
}

impl Visit for PlainFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.name(field) {
            return;
        }
        if field.name() == "message" {
            self.plain = !value.chars().any(escaped_in_messages);
            self.line.push_str(value);
        } else {
            quoted_str(self.line, value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.name(field) {
            return;
        }
        let start = self.line.len();
        let _ = write!(self.line, "{value:?}");
        if field.name() == "message" && self.line[start..].chars().any(escaped_in_messages) {
            self.plain = false;
        }
    }

    /// As `{:?}` writes it (the status, for one): without the formatting machinery.
    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.name(field) {
            self.line.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.name(field) {
            self.line.push_str(itoa::Buffer::new().format(value));
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if !self.name(field) {
            return;
        }
        write_f64(self.line, value);
    }

    fn record_error(&mut self, _: &Field, _: &(dyn std::error::Error + 'static)) {
        self.plain = false;
    }
}

/// Writes a string field's value as `{:?}` does: quoted, and copied whole when nothing in it
/// needs escaping.
pub(super) fn quoted_str(line: &mut String, value: &str) {
    if value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        line.push('"');
        line.push_str(value);
        line.push('"');
    } else {
        let _ = write!(line, "{value:?}");
    }
}

/// Writes `value` as `{:?}` does. A latency is logged in whole microseconds, as the double
/// nearest `n / 1000`, and the shortest digits that read back to that double are the decimal
/// `n / 1000` itself (no other string as short lies within its rounding interval): those are
/// written from the integer, for about a quarter of what the float formatter costs. Any other
/// value takes `{:?}`.
pub(super) fn write_f64(line: &mut String, value: f64) {
    let thousandths = (value * 1000.0).round();
    if !((1.0..1e15).contains(&thousandths) && thousandths / 1000.0 == value) {
        let _ = write!(line, "{value:?}");
        return;
    }
    let n = thousandths as u64;
    line.push_str(itoa::Buffer::new().format(n / 1000));
    line.push('.');
    let mut fraction = n % 1000;
    if fraction == 0 {
        line.push('0');
    }
    let mut divisor = 100;
    while fraction != 0 {
        line.push(char::from(b'0' + (fraction / divisor) as u8));
        fraction %= divisor;
        divisor /= 10;
    }
}

/// What the general formatter escapes in a message, so that a message cannot drive a terminal.
fn escaped_in_messages(c: char) -> bool {
    matches!(
        c,
        '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
    )
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
