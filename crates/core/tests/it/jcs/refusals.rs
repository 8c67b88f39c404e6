//! Bodies with no canonical form: not JSON, or JSON that is not I-JSON.

use super::canon;
use idempotency_core::policy::jcs::{self, NotIJson, MAX_DEPTH};

#[test]
fn what_is_not_json_has_no_canonical_form() {
    let bodies: [&[u8]; 16] = [
        b"",
        b"   ",
        b"hello",
        b"{",
        b"[1,]",
        b"{\"a\":1,}",
        b"{'a': 1}",
        b"{\"a\" 1}",
        b"{1: 2}",
        b"[1 2]",
        b"\"tab\tinside\"",
        b"\"\\x41\"",
        b"\"\\u12\"",
        b"\"\\u+123\"",
        b"\xef\xbb\xbf{}",
        b"\"\xff\"",
    ];
    for body in bodies {
        assert_eq!(
            jcs::try_canonicalize(body, &[]),
            Err(NotIJson::Syntax),
            "{}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(jcs::canonicalize(body, &[]), None);
    }
    assert_eq!(canon("{} {}"), Err(NotIJson::Syntax));
    assert_eq!(canon("truex"), Err(NotIJson::Syntax));
    assert_eq!(canon("nul"), Err(NotIJson::Syntax));
}

/// I-JSON forbids duplicate names, and so does this canonicalization, rather than keep the last
/// as `serde_json` does: another reader of the same body could keep the first.
#[test]
fn duplicate_member_names_are_refused() {
    for body in [
        r#"{"a": 1, "a": 2}"#,
        r#"{"a": 1, "a": 1}"#,
        r#"{"a": 1, "\u0061": 2}"#,
        r#"{"outer": {"x": true, "y": 0, "x": false}}"#,
        r#"[{"k": 1}, {"k": 2, "j": 3, "k": 4}]"#,
    ] {
        assert_eq!(canon(body), Err(NotIJson::DuplicateName), "{body}");
    }
    assert_eq!(
        canon(r#"{"k": {"k": 1}, "j": {"k": 2}}"#).unwrap(),
        r#"{"j":{"k":2},"k":{"k":1}}"#
    );
}

#[test]
fn lone_surrogates_are_refused_and_pairs_kept() {
    for body in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud800\u0041""#,
        r#""\ud800x""#,
        r#""\ude00\ud83d""#,
        r#"{"\udbff": 1}"#,
    ] {
        assert_eq!(canon(body), Err(NotIJson::LoneSurrogate), "{body}");
    }
    assert_eq!(canon(r#""\ud83d\ude00""#).unwrap(), "\"\u{1f600}\"");
    assert_eq!(canon(r#""\uD83D\uDE00""#).unwrap(), "\"\u{1f600}\"");
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn nested_objects(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

/// The limit is `serde_json`'s, so a body the rest of the proxy reads is one this reads.
#[test]
fn nesting_stops_where_serde_json_stops() {
    for depth in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1] {
        for body in [nested(depth), nested_objects(depth)] {
            let serde = serde_json::from_str::<serde_json::Value>(&body).is_ok();
            let ours = canon(&body);
            assert_eq!(ours.is_ok(), serde, "depth {depth}");
            if depth > MAX_DEPTH {
                assert_eq!(ours, Err(NotIJson::TooDeep), "depth {depth}");
            } else {
                assert_eq!(ours.unwrap(), body.replace(' ', ""));
            }
        }
    }
}

/// A million open brackets are refused on a thread with a 256 KiB stack: the parser's
/// recursion ends at the limit, long before the stack would.
#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let outcome = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let brackets = "[".repeat(1_000_000);
            let objects = "{\"a\":".repeat(1_000_000);
            let at_limit = nested(MAX_DEPTH);
            (
                jcs::try_canonicalize(brackets.as_bytes(), &[]),
                jcs::try_canonicalize(objects.as_bytes(), &[]),
                jcs::try_canonicalize(at_limit.as_bytes(), &[]).is_ok(),
            )
        })
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert_eq!(outcome.0, Err(NotIJson::TooDeep));
    assert_eq!(outcome.1, Err(NotIJson::TooDeep));
    assert!(outcome.2);
}

#[test]
fn reasons_read_as_sentences() {
    assert_eq!(
        NotIJson::DuplicateName.to_string(),
        "an object names the same member twice"
    );
    assert_eq!(
        NotIJson::InexactInteger.to_string(),
        "an integer that a double cannot hold exactly"
    );
}
