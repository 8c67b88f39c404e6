//! Tests that the text log's own line writer writes what the general formatter would, byte
//! for byte, timestamps included.

use std::time::Duration;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use super::*;
use crate::operator::logging::captured::Captured;

#[derive(Debug)]
struct Failure;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("upstream refused")
    }
}

impl std::error::Error for Failure {}

/// Every shape of event the proxy logs, and the ones the fast path hands over.
fn events() {
    let none: Option<&str> = None;
    tracing::info!(
        route = "payments",
        outcome = "forwarded",
        status = 201_u16,
        latency_ms = 0.53,
        key = "3f2a9c01d4e5",
        problem = none,
        cause = Some("upstream"),
        "request"
    );
    tracing::warn!(
        route = "default",
        key = "a\"quoted\\key",
        "store unavailable"
    );
    tracing::info!(
        name = "naïve ü",
        count = -3_i64,
        flag = true,
        whole = 2.0,
        "unicode"
    );
    tracing::info!(r#type = "key-reused", "a raw name");
    tracing::info!(value = ?Some(3), shown = %"display", "debug and display");
    tracing::info!("a message with \"quotes\" and a tab\t");
    tracing::info!("a message with an escape \x1b[31m");
    tracing::info!(text = "a control \x07 character", "control");
    tracing::error!(
        error = &Failure as &(dyn std::error::Error + 'static),
        "failed"
    );
    tracing::info!(only = 1);
    let span = tracing::info_span!("reload", file = "proxy.toml");
    span.in_scope(|| tracing::info!(routes = 3, "in a span"));
}

fn capture(text_line: bool) -> Vec<String> {
    let out = Captured::default();
    let builder = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(Level::TRACE)
        .with_writer(out.clone());
    if text_line {
        let subscriber = builder.event_format(TextLine::default()).finish();
        tracing::subscriber::with_default(subscriber, events);
    } else {
        tracing::subscriber::with_default(builder.finish(), events);
    }
    out.lines()
}

#[test]
fn lines_are_those_of_the_general_formatter() {
    let general = capture(false);
    let fast = capture(true);
    assert_eq!(general.len(), 11);
    assert_eq!(fast, general);
    assert!(fast[0].starts_with(
        " INFO idempotency_proxy::operator::logging::text::tests: request route=\"payments\""
    ));
}

#[test]
fn timestamps_are_those_of_the_general_formatter() {
    for _ in 0..100 {
        let mut general = String::new();
        SystemClock
            .format_time(&mut Writer::new(&mut general))
            .unwrap();
        let mut fast = String::new();
        assert!(timestamp(&mut fast, SystemTime::now()));
        if general[..20] == fast[..20] {
            assert_eq!(fast.len(), general.len());
            assert!(fast.ends_with('Z'));
            return;
        }
    }
    panic!("the two timestamps never fell in the same second");
}

#[test]
fn microseconds_are_padded_to_six_digits() {
    for n in [0, 7, 42, 999, 100_000, 999_999] {
        let mut line = String::new();
        micros(&mut line, n);
        assert_eq!(line, format!("{n:06}Z"));
    }
}

#[test]
fn dates_across_leap_days_and_centuries() {
    let day = |days: u64| civil_from_days(days);
    assert_eq!(day(0), (1970, 1, 1));
    assert_eq!(day(11_016), (2000, 2, 29));
    assert_eq!(day(11_017), (2000, 3, 1));
    assert_eq!(day(47_540), (2100, 2, 28));
    assert_eq!(day(47_541), (2100, 3, 1));
    assert_eq!(day(20_787), (2026, 11, 30));
    let mut text = String::new();
    let at = UNIX_EPOCH + Duration::from_secs(20_787 * 86_400 + 17 * 3600 + 4 * 60 + 32);
    let seconds = at.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert!(date_and_time(&mut text, seconds));
    assert_eq!(text, "2026-11-30T17:04:32.");
}

#[test]
fn a_time_the_general_formatter_writes_differently_is_handed_over() {
    let mut line = String::new();
    assert!(!timestamp(&mut line, UNIX_EPOCH - Duration::from_secs(1)));
    let far = UNIX_EPOCH + Duration::from_secs(260_000_000_000);
    assert!(!timestamp(&mut line, far));
}

proptest::proptest! {
    #[test]
    fn floats_are_written_as_debug_writes_them(bits in proptest::num::u64::ANY, micros in 0..10_000_000_000_000u64) {
        let latency = micros as f64 / 1000.0;
        for value in [f64::from_bits(bits), latency, (micros % 1_000_000) as f64 / 1000.0] {
            let mut line = String::new();
            write_f64(&mut line, value);
            proptest::prop_assert_eq!(line, format!("{value:?}"));
        }
    }
}

#[test]
fn floats_at_the_edges_are_written_as_debug_writes_them() {
    let edges = [
        0.0, -0.0, 0.001, 0.01, 0.1, 0.53, 1.0, 1.5, 10.25, 100.125, 1e-4, 1e-5, 1e12,
    ];
    let more = [1e15, 1e16, 0.1 + 0.2, 5e-324, -2.5, 999_999_999_999.999];
    for value in edges
        .into_iter()
        .chain(more)
        .chain([f64::NAN, f64::INFINITY])
    {
        let mut line = String::new();
        write_f64(&mut line, value);
        assert_eq!(line, format!("{value:?}"), "{value:e}");
    }
}
