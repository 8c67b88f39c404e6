//! The properties the core's fuzz targets check, one function per target: keys from headers
//! and bodies, records and deliveries as stores keep them, canonical JSON.
//!
//! The fuzz targets in `fuzz/` include this file and call these on every input, and
//! `tests/it/fuzz_corpus.rs` calls them on every file of the kept corpora, so both check exactly
//! the same thing, through the crate's public API. Each function panics when the property does
//! not hold; it returns normally for any input the parsers it drives must accept or refuse
//! gracefully.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use idempotency_core::backend::{
    CompletedRecord, Delivery, FencingToken, Fingerprint, IdempotencyKey, InFlightRecord,
    PartDigests, Record, StoredBody, MAX_KEY_LEN,
};
use idempotency_core::policy::jcs::{self, JsonPointer};

/// The check a fuzz target runs on one input.
pub(crate) type Check = fn(&[u8]);

/// The names of the core's fuzz targets, which are also the folders of their corpora.
pub(crate) const TARGETS: &[(&str, Check)] = &[
    ("key_header", key_header),
    ("key_body_pointer", key_body_pointer),
    ("record_decode", record_decode),
    ("record_roundtrip", record_roundtrip),
    ("jcs", jcs),
];

/// The RFC 9651 sf-string form of a key: quoted, with `\` and `"` escaped.
pub(crate) fn sf_string(key: &IdempotencyKey) -> String {
    let mut out = String::with_capacity(key.as_str().len() + 2);
    out.push('"');
    for c in key.as_str().chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn assert_valid_key(key: &IdempotencyKey) {
    let text = key.as_str();
    assert!(
        (1..=MAX_KEY_LEN).contains(&text.len()),
        "accepted a key of {} bytes",
        text.len()
    );
    assert!(
        text.bytes().all(|b| b.is_ascii_graphic()),
        "accepted a key that is not visible ASCII: {text:?}"
    );
}

/// A header value: parsing never panics, and an accepted key is 1 to 255 visible ASCII
/// characters that parse back to themselves from their sf-string form, and verbatim.
pub(crate) fn key_header(data: &[u8]) {
    let Ok(key) = IdempotencyKey::from_header_value(data) else {
        return;
    };
    assert_valid_key(&key);
    let quoted = sf_string(&key);
    assert_eq!(
        IdempotencyKey::from_header_value(quoted.as_bytes()).as_ref(),
        Ok(&key),
        "the sf-string {quoted:?} does not parse back to its key"
    );
    assert_eq!(IdempotencyKey::new(key.as_str()).as_ref(), Ok(&key));
}

/// A body and a JSON pointer: the first byte is the pointer's length, then the pointer, then
/// the body. Never panics; a key found is valid and is the string or integer at the pointer.
pub(crate) fn key_body_pointer(data: &[u8]) {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let (pointer, body) = rest.split_at(usize::from(len).min(rest.len()));
    let pointer = String::from_utf8_lossy(pointer);
    let Ok(Some(key)) = IdempotencyKey::from_json_body(body, &pointer) else {
        return;
    };
    assert_valid_key(&key);
    let document: serde_json::Value =
        serde_json::from_slice(body).expect("a key came from a body that is not JSON");
    let found = match document.pointer(&pointer) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        other => panic!("a key came from {other:?}"),
    };
    assert_eq!(key.as_str(), found);
}

/// Bytes as a store holds them: decoding never panics, and what decodes encodes to the same
/// bytes, read as a record and as an inbox delivery. (The file store, which keeps an expiry
/// before each record, checks its own reading of the same corpus.)
pub(crate) fn record_decode(data: &[u8]) {
    check_record_bytes(data);
    check_delivery_bytes(data);
}

fn check_record_bytes(data: &[u8]) {
    let Ok(record) = Record::decode(Bytes::copy_from_slice(data)) else {
        return;
    };
    assert_eq!(
        record.encode().as_ref(),
        data,
        "a decoded record does not encode to the bytes it came from: {record:?}"
    );
}

/// Stored bytes read as an inbox delivery: whatever decodes encodes to bytes that decode to the
/// same delivery.
fn check_delivery_bytes(data: &[u8]) {
    let Ok(delivery) = Delivery::decode(Bytes::copy_from_slice(data)) else {
        return;
    };
    let again = Delivery::decode(delivery.encode());
    assert_eq!(
        again.as_ref(),
        Ok(&delivery),
        "a decoded delivery does not survive its encoding"
    );
}

/// A record built from the bytes: encoding and decoding gives it back.
pub(crate) fn record_roundtrip(data: &[u8]) {
    let mut input = Input(data);
    let token = FencingToken::from_u64(input.u64());
    let whole = input.array();
    let created_at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(input.u64());
    let shape = input.u8();
    // Part digests only when bit 1 asks for them, so inputs without it read as they always did.
    let fingerprint = match shape & 2 {
        0 => Fingerprint::from_bytes(whole),
        _ => Fingerprint::with_parts(whole, PartDigests::from_bytes(input.array())),
    };
    let record = if shape & 1 == 0 {
        Record::InFlight(InFlightRecord {
            fingerprint,
            token,
            created_at,
        })
    } else {
        let status = StatusCode::from_u16(100 + input.u16() % 900).expect("100..=999");
        let mut headers = HeaderMap::new();
        for _ in 0..input.u8() % 16 {
            let name_len = input.u8() % 24;
            let name = input.bytes(usize::from(name_len));
            let value_len = input.u8();
            let value = input.bytes(usize::from(value_len));
            if let (Ok(name), Ok(value)) =
                (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
            {
                headers.append(name, value);
            }
        }
        let body = match input.u8() {
            0 => StoredBody::NotKept,
            // A gRPC answer: its trailers are a header map like any other.
            1 => StoredBody::KeptWithTrailers {
                body: Bytes::copy_from_slice(input.rest()),
                trailers: Box::new(headers.clone()),
            },
            _ => StoredBody::Kept(Bytes::copy_from_slice(input.rest())),
        };
        Record::Completed(CompletedRecord {
            fingerprint,
            token,
            created_at,
            status,
            headers,
            body,
        })
    };
    let encoded = record.encode();
    if let Record::InFlight(r) = &record {
        assert!(encoded.starts_with(&r.token.in_flight_prefix()));
    }
    assert_eq!(Record::decode(encoded).as_ref(), Ok(&record));
}

/// A body and the pointers to ignore in it: the first byte is the length of the pointers, one
/// per line, then the body. Canonicalizing never panics; a body it accepts is one `serde_json`
/// reads; what it writes canonicalizes to itself; and ignoring members gives the same as
/// ignoring them in the canonical form, as spelling never moves a member or element.
pub(crate) fn jcs(data: &[u8]) {
    let Some((&len, rest)) = data.split_first() else {
        return;
    };
    let (pointers, body) = rest.split_at(usize::from(len).min(rest.len()));
    let pointers = String::from_utf8_lossy(pointers);
    let ignore: Vec<JsonPointer> = pointers
        .split('\n')
        .filter_map(|p| JsonPointer::parse(p).ok())
        .collect();
    let Ok(whole) = jcs::try_canonicalize(body, &[]) else {
        assert!(jcs::try_canonicalize(body, &ignore).is_err());
        return;
    };
    serde_json::from_slice::<serde_json::Value>(body).expect("accepted a body serde_json refuses");
    let again = jcs::try_canonicalize(&whole, &[]);
    assert_eq!(
        again.as_ref(),
        Ok(&whole),
        "the canonical form is not a fixed point"
    );
    let ignoring = jcs::try_canonicalize(body, &ignore).expect("a body accepted whole");
    let from_canonical = jcs::try_canonicalize(&whole, &ignore);
    assert_eq!(
        from_canonical.as_ref(),
        Ok(&ignoring),
        "spelling moved what {ignore:?} names"
    );
    let again = jcs::try_canonicalize(&ignoring, &[]);
    assert_eq!(
        again.as_ref(),
        Ok(&ignoring),
        "not canonical with {ignore:?} ignored"
    );
}

/// Reads fixed-width fields from the front of the input, zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (taken, rest) = self.0.split_at(len.min(self.0.len()));
        self.0 = rest;
        taken
    }

    fn rest(&mut self) -> &'a [u8] {
        self.bytes(self.0.len())
    }

    fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.u8())
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |n, _| n << 8 | u64::from(self.u8()))
    }
}
