//! Tests that the request line reads the same whether written straight or through a tracing
//! event.

use super::*;
use crate::operator::logging::captured::Captured;
use crate::operator::logging::text::TextLine;

/// What the text log writes for `line`'s tracing event, without its timestamp: through the
/// general formatter (`general`), or through [`TextLine`].
fn as_event(line: &RequestLine<'_>, general: bool) -> String {
    let out = Captured::default();
    let builder = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(out.clone());
    if general {
        tracing::subscriber::with_default(builder.finish(), || line.log());
    } else {
        let subscriber = builder.event_format(TextLine::default()).finish();
        tracing::subscriber::with_default(subscriber, || line.log());
    }
    let lines = out.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    format!("{}\n", lines[0])
}

fn written(line: &RequestLine<'_>) -> String {
    let mut text = String::new();
    assert!(line.write(&mut text, SystemTime::now()));
    text.split_once(' ').unwrap().1.to_owned()
}

fn lines() -> Vec<RequestLine<'static>> {
    let plain = RequestLine {
        route: "default",
        outcome: "bypassed",
        status: 201,
        grpc_status: None,
        latency: Duration::from_micros(312),
        key: "-",
        problem: None,
        cause: None,
    };
    vec![
        plain,
        RequestLine {
            outcome: "mismatch",
            status: 422,
            latency: Duration::from_micros(15),
            key: "e6d051ad0d51",
            problem: Some("key-reused"),
            ..plain
        },
        RequestLine {
            route: "pay\\ments",
            outcome: "upstream_error",
            status: 502,
            grpc_status: None,
            latency: Duration::from_secs(30),
            key: "bee77869fba6",
            problem: Some("upstream-unavailable"),
            cause: Some("upstream said \"no\" — tschüss\n"),
        },
        RequestLine {
            latency: Duration::ZERO,
            ..plain
        },
        RequestLine {
            route: "payments-grpc",
            outcome: "conflict",
            status: 200,
            grpc_status: Some(10),
            problem: Some("request-in-flight"),
            ..plain
        },
        RequestLine {
            latency: Duration::from_nanos(1_234_567_891),
            cause: Some("connection refused"),
            ..plain
        },
    ]
}

#[test]
fn the_line_is_the_one_the_text_log_writes_for_its_event() {
    for line in lines() {
        let general = as_event(&line, true);
        assert_eq!(written(&line), general, "{line:?}");
        assert_eq!(as_event(&line, false), general, "{line:?}");
    }
}

#[test]
fn the_line_names_the_request_and_its_fields() {
    let text = written(&lines()[1]);
    assert_eq!(
        text,
        " INFO idempotency_proxy::telemetry: request route=\"default\" outcome=\"mismatch\" \
         status=422 latency_ms=0.015 key=\"e6d051ad0d51\" problem=\"key-reused\"\n"
    );
}

#[test]
fn without_the_proxys_own_log_the_line_is_a_tracing_event() {
    // No `logging::init` in this process: `log` hands the line to the subscriber in force.
    assert!(!written_directly());
    let text = as_event(&lines()[0], true);
    assert!(text.starts_with(" INFO idempotency_proxy::telemetry: request route=\"default\""));
}
