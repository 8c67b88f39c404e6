//! `fingerprint_ignore` pointers: their RFC 6901 syntax, and what removing them does.

use super::canon_ignoring;
use idempotency_core::policy::{JsonPointer, JsonPointerError};

#[test]
fn a_pointer_must_start_with_a_slash() {
    let empty = JsonPointer::parse("").unwrap_err();
    assert_eq!(empty, JsonPointerError::Empty);
    assert!(empty.to_string().contains("whole body"), "{empty}");
    let relative = JsonPointer::parse("metadata/request_time")
        .unwrap_err()
        .to_string();
    assert!(relative.contains("must start with '/'"), "{relative}");
    assert!(relative.contains("metadata/request_time"), "{relative}");
}

#[test]
fn a_tilde_must_escape_a_tilde_or_a_slash() {
    for bad in ["/a~", "/a~2", "/~a/b", "/ok/~"] {
        let reason = JsonPointer::parse(bad).unwrap_err();
        assert_eq!(reason, JsonPointerError::BadEscape(bad.to_owned()));
        let reason = reason.to_string();
        assert!(reason.contains("'~' must be followed"), "{bad}: {reason}");
    }
}

#[test]
fn pointers_keep_what_they_were_written_as() {
    let pointer = JsonPointer::parse("/a~1b/~0").unwrap();
    assert_eq!(pointer.as_str(), "/a~1b/~0");
    assert_eq!(pointer.to_string(), "/a~1b/~0");
}

/// `~1` is `/`, `~0` is `~`, and `~01` is `~1`: unescaped left to right, `~0` first.
#[test]
fn escaped_names_are_matched_unescaped() {
    let body = r#"{"a/b": 1, "m~n": 2, "~1": 3, "": 4, "x": 5}"#;
    assert_eq!(
        canon_ignoring(body, &["/a~1b", "/m~0n", "/~01", "/"]).unwrap(),
        r#"{"x":5}"#
    );
}

/// A member's name is matched after its JSON escapes are undone.
#[test]
fn json_escapes_in_names_do_not_hide_them() {
    let body = r#"{"\u0061": 1, "b": 2}"#;
    assert_eq!(canon_ignoring(body, &["/a"]).unwrap(), r#"{"b":2}"#);
}

#[test]
fn nested_members_are_removed_and_their_siblings_kept() {
    let body = r#"{"amount": 100, "metadata": {"request_time": "12:00:01", "source": "app"}}"#;
    let retry = r#"{"metadata": {"source": "app", "request_time": "12:00:07"}, "amount": 100}"#;
    let ignore = ["/metadata/request_time"];
    let expected = r#"{"amount":100,"metadata":{"source":"app"}}"#;
    assert_eq!(canon_ignoring(body, &ignore).unwrap(), expected);
    assert_eq!(canon_ignoring(retry, &ignore).unwrap(), expected);
}

/// Every pointer names an element of the array as sent; listing them in another order
/// removes the same elements.
#[test]
fn array_elements_are_named_by_their_indices_as_sent() {
    let body = r#"{"items": [10, 20, 30, 40]}"#;
    assert_eq!(
        canon_ignoring(body, &["/items/0", "/items/1"]).unwrap(),
        r#"{"items":[30,40]}"#
    );
    assert_eq!(
        canon_ignoring(body, &["/items/1", "/items/0"]).unwrap(),
        r#"{"items":[30,40]}"#
    );
    assert_eq!(
        canon_ignoring(body, &["/items/3", "/items/1"]).unwrap(),
        r#"{"items":[10,30]}"#
    );
}

#[test]
fn members_inside_array_elements() {
    let body = r#"[{"id": 1, "sent_at": 5}, {"id": 2, "sent_at": 6}]"#;
    assert_eq!(
        canon_ignoring(body, &["/0/sent_at", "/1/sent_at"]).unwrap(),
        r#"[{"id":1},{"id":2}]"#
    );
}

/// `-`, an index with a leading zero, one past the end, and a path through a scalar or a
/// missing member name nothing, so nothing is removed.
#[test]
fn pointers_that_name_nothing_remove_nothing() {
    let body = r#"{"items": [10, 20], "n": 1, "s": "text"}"#;
    let pointers = [
        "/items/-",
        "/items/01",
        "/items/2",
        "/items/x",
        "/n/0",
        "/s/0",
        "/missing",
        "/missing/deeper",
    ];
    assert_eq!(
        canon_ignoring(body, &pointers).unwrap(),
        r#"{"items":[10,20],"n":1,"s":"text"}"#
    );
}

/// An object's members are named by name even when the name looks like an index.
#[test]
fn index_like_tokens_name_object_members() {
    let body = r#"{"0": "zero", "1": "one", "01": "zero-one"}"#;
    assert_eq!(
        canon_ignoring(body, &["/0", "/01"]).unwrap(),
        r#"{"1":"one"}"#
    );
}

/// A pointer beneath one that is removed changes nothing, in either order.
#[test]
fn overlapping_pointers() {
    let body = r#"{"a": {"b": 1, "c": 2}, "d": 3}"#;
    assert_eq!(canon_ignoring(body, &["/a", "/a/b"]).unwrap(), r#"{"d":3}"#);
    assert_eq!(canon_ignoring(body, &["/a/b", "/a"]).unwrap(), r#"{"d":3}"#);
}
