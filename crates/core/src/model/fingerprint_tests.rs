//! Tests of the fingerprint: what each part covers, which parts a mismatch names, the two ways
//! of reading a body, and the digest of records stored before part digests.

use http::HeaderValue;
use proptest::prelude::*;

use super::*;

fn fp_as(
    method: &str,
    uri: &str,
    headers: &HeaderMap,
    names: &[HeaderName],
    body: &[u8],
    form: &FingerprintBody,
) -> Fingerprint {
    let (method, uri) = (method.parse().unwrap(), uri.parse().unwrap());
    Fingerprint::compute(&method, &uri, headers, names, body, form)
}

fn fp(
    method: &str,
    uri: &str,
    headers: &HeaderMap,
    names: &[HeaderName],
    body: &[u8],
) -> Fingerprint {
    fp_as(method, uri, headers, names, body, &FingerprintBody::Bytes)
}

fn json(ignore: &[&str]) -> FingerprintBody {
    let ignore = ignore
        .iter()
        .map(|p| JsonPointer::parse(p).unwrap())
        .collect();
    FingerprintBody::Json { ignore }
}

fn body_fp(body: &str, form: &FingerprintBody) -> Fingerprint {
    fp_as(
        "POST",
        "/v1/charges",
        &HeaderMap::new(),
        &[],
        body.as_bytes(),
        form,
    )
}

#[test]
fn each_part_of_the_request_counts_and_is_named() {
    let none = HeaderMap::new();
    let base = fp("POST", "/v1/charges?a=1", &none, &[], b"{}");
    assert_eq!(base, fp("POST", "/v1/charges?a=1", &none, &[], b"{}"));
    let differs = |other: Fingerprint| {
        assert_ne!(base, other);
        base.differing_parts(&other)
    };
    assert_eq!(
        differs(fp("PATCH", "/v1/charges?a=1", &none, &[], b"{}")),
        [Part::Method]
    );
    assert_eq!(
        differs(fp("POST", "/v1/charges?a=2", &none, &[], b"{}")),
        [Part::Target]
    );
    assert_eq!(
        differs(fp("POST", "/v1/charges?a=1", &none, &[], b"{ }")),
        [Part::Body]
    );
    assert_eq!(
        differs(fp("PUT", "/v1/refunds", &none, &[], b"{ }")),
        [Part::Method, Part::Target, Part::Body]
    );
}

#[test]
fn only_named_headers_count() {
    let tenant = HeaderName::from_static("x-tenant");
    let mut a = HeaderMap::new();
    a.insert(&tenant, HeaderValue::from_static("a"));
    a.insert("x-request-id", HeaderValue::from_static("1"));
    let mut b = a.clone();
    b.insert("x-request-id", HeaderValue::from_static("2"));
    let names = [tenant.clone()];
    let first = fp("POST", "/", &a, &names, b"");
    assert_eq!(first, fp("POST", "/", &b, &names, b""));
    b.insert(&tenant, HeaderValue::from_static("b"));
    let other_value = fp("POST", "/", &b, &names, b"");
    assert_eq!(first.differing_parts(&other_value), [Part::Headers]);
    b.append(&tenant, HeaderValue::from_static("b"));
    assert_ne!(other_value, fp("POST", "/", &b, &names, b""), "sent twice");
    b.remove(&tenant);
    assert_eq!(
        first.differing_parts(&fp("POST", "/", &b, &names, b"")),
        [Part::Headers]
    );
}

#[test]
fn json_bodies_are_compared_by_what_they_say() {
    let form = json(&[]);
    let sent = body_fp(r#"{"amount": 100, "currency": "eur"}"#, &form);
    let rebuilt = body_fp("{\"currency\":\"eur\",\n  \"amount\":1.00e2}", &form);
    assert_eq!(sent, rebuilt);
    let other = body_fp(r#"{"amount": 101, "currency": "eur"}"#, &form);
    assert_eq!(sent.differing_parts(&other), [Part::Body]);
    let bytes = FingerprintBody::Bytes;
    assert_ne!(
        body_fp(r#"{"amount": 100, "currency": "eur"}"#, &bytes),
        body_fp("{\"currency\":\"eur\",\n  \"amount\":1.00e2}", &bytes)
    );
}

#[test]
fn ignored_members_may_change_and_nothing_else() {
    let form = json(&["/metadata/request_time"]);
    let sent = body_fp(
        r#"{"a": 1, "metadata": {"request_time": "12:00:01"}}"#,
        &form,
    );
    let retry = body_fp(
        r#"{"metadata": {"request_time": "12:00:09"}, "a": 1}"#,
        &form,
    );
    let changed = body_fp(
        r#"{"a": 2, "metadata": {"request_time": "12:00:01"}}"#,
        &form,
    );
    assert_eq!(sent, retry);
    assert_eq!(sent.differing_parts(&changed), [Part::Body]);
}

#[test]
fn a_body_that_is_not_json_counts_by_its_bytes() {
    let form = json(&[]);
    let duplicate = r#"{"a": 1, "a": 2}"#;
    assert_eq!(body_fp("amount=100", &form), body_fp("amount=100", &form));
    assert_ne!(body_fp("amount=100", &form), body_fp("amount=100 ", &form));
    assert_ne!(
        body_fp(duplicate, &form),
        body_fp(r#"{"a":1,"a":2}"#, &form)
    );
}

/// Records stored under one `fingerprint_body` do not match requests read the other way, even
/// where the two readings agree byte for byte.
#[test]
fn the_body_digest_names_how_the_body_was_read() {
    let canonical = r#"{"a":1}"#;
    let as_bytes = body_fp(canonical, &FingerprintBody::Bytes);
    let as_json = body_fp(canonical, &json(&[]));
    assert_eq!(as_bytes.differing_parts(&as_json), [Part::Body]);
}

/// The digest records stored before part digests carry, pinned to a value computed outside
/// this code (Python's hashlib over the same length-prefixed fields).
#[test]
fn the_unsplit_digest_is_the_one_stored_before_part_digests() {
    let mut headers = HeaderMap::new();
    headers.insert("x-tenant", HeaderValue::from_static("acme"));
    let names = [HeaderName::from_static("x-tenant")];
    let unsplit = Fingerprint::compute_unsplit(
        &Method::POST,
        &"/v1/charges?a=1".parse().unwrap(),
        &headers,
        &names,
        br#"{"amount":100}"#,
    );
    assert_eq!(
        hex::encode(unsplit.as_bytes()),
        "05b0cf3668fe5b3dd3ee42d82da3b442fc6879ebdd9cee4a0d185ddef6cbb1f1"
    );
    assert!(unsplit.parts().is_none());
    let split = fp(
        "POST",
        "/v1/charges?a=1",
        &headers,
        &names,
        br#"{"amount":100}"#,
    );
    assert_ne!(split, unsplit);
    assert!(
        split.differing_parts(&unsplit).is_empty(),
        "its parts are unknown"
    );
}

#[test]
fn part_digests_round_trip_as_stored() {
    let parts = *fp("POST", "/x", &HeaderMap::new(), &[], b"b")
        .parts()
        .unwrap();
    assert_eq!(PartDigests::from_bytes(parts.to_bytes()), parts);
    assert_eq!(parts.hex(Part::Body).len(), 2 * PartDigests::LEN);
}

proptest! {
    #[test]
    fn moving_bytes_between_path_and_body_changes_it(path in "/[a-z]{0,8}", body in proptest::collection::vec(any::<u8>(), 1..64)) {
        let none = HeaderMap::new();
        let moved = format!("{path}{}", String::from_utf8_lossy(&body[..1]).replace(|c: char| !c.is_ascii_alphanumeric(), "x"));
        let original = fp("POST", &path, &none, &[], &body);
        prop_assert_ne!(original, fp("POST", &moved, &none, &[], &body[1..]));
    }

    #[test]
    fn distinct_bodies_give_distinct_fingerprints(a in proptest::collection::vec(any::<u8>(), 0..128), b in proptest::collection::vec(any::<u8>(), 0..128)) {
        let none = HeaderMap::new();
        prop_assert_eq!(a == b, fp("POST", "/", &none, &[], &a) == fp("POST", "/", &none, &[], &b));
    }
}

/// The digests hashed once are the digests hashing gives.
#[test]
fn kept_digests_are_those_of_the_parts() {
    for method in [
        Method::POST,
        Method::PATCH,
        Method::PUT,
        Method::DELETE,
        Method::GET,
    ] {
        let expected: [u8; 32] = Sha256::digest(method.as_str()).into();
        assert_eq!(method_digest(&method), expected, "{method}");
    }
    let no_names: [u8; 32] = Sha256::digest(b"").into();
    assert_eq!(headers_digest(&HeaderMap::new(), &[]), no_names);
}
