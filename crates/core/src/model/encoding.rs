//! The compact binary encoding every store keeps records in.
//!
//! The encoding starts with a fixed header (`version`, `state`, fencing token, the whole
//! fingerprint, when it was made) so that a store script can check "is this still the in-flight
//! record of token T?" by comparing a prefix, without understanding the rest. Decoding is
//! strict: a record that does not parse to the last byte, or that is not in the one form
//! `encode` writes, is reported as corrupt, never half-replayed.
//!
//! The fingerprint's part digests follow the header as a section of its own: the byte `0xFF`,
//! then the four kept digests. Records written before part digests existed have no such section
//! and decode with their parts unknown (and encode back to the same bytes). The section's first
//! byte cannot be mistaken for what follows the header in such a record: an in-flight record
//! ends with its header, and a completed one goes on with its status, whose first byte is at
//! most `0x03`. The header itself is unchanged, version byte included, so the ten bytes the
//! stores' fencing checks compare ([`FencingToken::in_flight_prefix`]) are the same for records
//! with and without part digests, and no store had to change to keep them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::clock::unix_millis;
use super::fingerprint::{Fingerprint, PartDigests};
use super::record::{CompletedRecord, InFlightRecord, Record, StoredBody};
use super::token::FencingToken;

const VERSION: u8 = 1;
/// Version, state, token, whole fingerprint, creation time.
const HEADER_LEN: usize = 50;
/// Starts the section holding the fingerprint's part digests.
const PART_DIGESTS: u8 = 0xFF;
const STATE_IN_FLIGHT: u8 = 0;
const STATE_COMPLETED: u8 = 1;
const BODY_KEPT: u8 = 0;
const BODY_NOT_KEPT: u8 = 1;
const BODY_PROBLEM: u8 = 2;
/// A kept body followed by its trailers (a gRPC answer's status): a tag of its own, so records
/// written before trailers were kept decode as they always did.
const BODY_KEPT_WITH_TRAILERS: u8 = 3;
/// The longest problem type a record may name; the proxy's own are far shorter.
const MAX_PROBLEM_LEN: usize = 64;

impl FencingToken {
    /// The bytes every encoding of the in-flight record of this token starts with.
    pub fn in_flight_prefix(self) -> [u8; 10] {
        let mut prefix = [0u8; 10];
        prefix[0] = VERSION;
        prefix[1] = STATE_IN_FLIGHT;
        prefix[2..].copy_from_slice(&self.as_u64().to_be_bytes());
        prefix
    }
}

impl Record {
    /// Whether an encoded record is an in-flight one, read from its state byte alone, so a
    /// store can decide inside one atomic step (a script, a write transaction) without
    /// decoding, or opening, the rest.
    pub fn encoded_in_flight(encoded: &[u8]) -> bool {
        encoded.get(1) == Some(&STATE_IN_FLIGHT)
    }
}

/// A stored record that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record: {0}")]
pub struct RecordError(&'static str);

impl RecordError {
    /// For decorators that unwrap a record further (a sealed one) and find it unusable.
    pub fn new(why: &'static str) -> Self {
        Self(why)
    }
}

impl CompletedRecord {
    /// The bytes of `Record::Completed` holding this record, written from a borrow: a store
    /// handed a completion encodes it without copying its header map first.
    pub fn encode(&self) -> Bytes {
        encode_completed(self)
    }
}

impl Record {
    /// The record's bytes as every store keeps them.
    pub fn encode(&self) -> Bytes {
        match self {
            Record::InFlight(r) => {
                encode_header(STATE_IN_FLIGHT, r.token, &r.fingerprint, r.created_at, 0).freeze()
            }
            Record::Completed(r) => encode_completed(r),
        }
    }

    /// Decodes a record; the body of a completed record shares `bytes` rather than copying.
    pub fn decode(bytes: Bytes) -> Result<Self, RecordError> {
        let mut buf = bytes;
        need(&buf, HEADER_LEN)?;
        if buf.get_u8() != VERSION {
            return Err(RecordError("unknown version"));
        }
        let state = buf.get_u8();
        let token = FencingToken::from_u64(buf.get_u64());
        let mut whole = [0u8; Fingerprint::LEN];
        buf.copy_to_slice(&mut whole);
        let created_at = UNIX_EPOCH + Duration::from_millis(buf.get_u64());
        let fingerprint = decode_part_digests(&mut buf, whole)?;
        match state {
            STATE_IN_FLIGHT if buf.is_empty() => Ok(Record::InFlight(InFlightRecord {
                fingerprint,
                token,
                created_at,
            })),
            STATE_COMPLETED => {
                decode_completed(buf, fingerprint, token, created_at).map(Record::Completed)
            }
            _ => Err(RecordError("unknown state or trailing bytes")),
        }
    }
}

fn encode_header(
    state: u8,
    token: FencingToken,
    fp: &Fingerprint,
    at: SystemTime,
    extra: usize,
) -> BytesMut {
    let parts_len = fp.parts().map_or(0, |_| 1 + PartDigests::STORED_LEN);
    let mut buf = BytesMut::with_capacity(HEADER_LEN + parts_len + extra);
    buf.put_u8(VERSION);
    buf.put_u8(state);
    buf.put_u64(token.as_u64());
    buf.put_slice(fp.as_bytes());
    buf.put_u64(unix_millis(at));
    if let Some(parts) = fp.parts() {
        buf.put_u8(PART_DIGESTS);
        buf.put_slice(&parts.to_bytes());
    }
    buf
}

/// The fingerprint whose whole digest the header held, with the part-digest section that may
/// follow it.
fn decode_part_digests(buf: &mut Bytes, whole: [u8; 32]) -> Result<Fingerprint, RecordError> {
    if buf.first() != Some(&PART_DIGESTS) {
        return Ok(Fingerprint::from_bytes(whole));
    }
    buf.advance(1);
    need(buf, PartDigests::STORED_LEN)?;
    let mut parts = [0u8; PartDigests::STORED_LEN];
    buf.copy_to_slice(&mut parts);
    Ok(Fingerprint::with_parts(
        whole,
        PartDigests::from_bytes(parts),
    ))
}

fn encode_completed(r: &CompletedRecord) -> Bytes {
    let body_len = match &r.body {
        StoredBody::Kept(body) => body.len(),
        StoredBody::KeptWithTrailers { body, trailers } => body.len() + headers_len(trailers),
        StoredBody::NotKept => 0,
        StoredBody::Problem(kind) => kind.len(),
    };
    let mut buf = encode_header(
        STATE_COMPLETED,
        r.token,
        &r.fingerprint,
        r.created_at,
        9 + headers_len(&r.headers) + body_len,
    );
    buf.put_u16(r.status.as_u16());
    encode_headers(&mut buf, &r.headers);
    match &r.body {
        StoredBody::Kept(body) => {
            buf.put_u8(BODY_KEPT);
            buf.put_u32(body.len() as u32);
            buf.put_slice(body);
        }
        StoredBody::KeptWithTrailers { body, trailers } => {
            buf.put_u8(BODY_KEPT_WITH_TRAILERS);
            buf.put_u32(body.len() as u32);
            buf.put_slice(body);
            encode_headers(&mut buf, trailers);
        }
        StoredBody::NotKept => buf.put_u8(BODY_NOT_KEPT),
        StoredBody::Problem(kind) => {
            buf.put_u8(BODY_PROBLEM);
            buf.put_u16(kind.len() as u16);
            buf.put_slice(kind.as_bytes());
        }
    }
    buf.freeze()
}

fn headers_len(headers: &HeaderMap) -> usize {
    let each: usize = headers
        .iter()
        .map(|(n, v)| 6 + n.as_str().len() + v.len())
        .sum();
    2 + each
}

/// A count, then each name and value; a name's values together, as a `HeaderMap` keeps them.
fn encode_headers(buf: &mut BytesMut, headers: &HeaderMap) {
    buf.put_u16(headers.len() as u16);
    for (name, value) in headers {
        buf.put_u16(name.as_str().len() as u16);
        buf.put_slice(name.as_str().as_bytes());
        buf.put_u32(value.len() as u32);
        buf.put_slice(value.as_bytes());
    }
}

fn decode_completed(
    mut buf: Bytes,
    fingerprint: Fingerprint,
    token: FencingToken,
    created_at: SystemTime,
) -> Result<CompletedRecord, RecordError> {
    need(&buf, 2)?;
    let status = StatusCode::from_u16(buf.get_u16()).map_err(|_| RecordError("bad status"))?;
    let headers = decode_headers(&mut buf)?;
    need(&buf, 1)?;
    let body = match buf.get_u8() {
        BODY_KEPT => StoredBody::Kept(take(&mut buf, 4)?),
        BODY_KEPT_WITH_TRAILERS => {
            let body = take(&mut buf, 4)?;
            let trailers = decode_headers(&mut buf)?;
            StoredBody::KeptWithTrailers {
                body,
                trailers: Box::new(trailers),
            }
        }
        BODY_NOT_KEPT => StoredBody::NotKept,
        BODY_PROBLEM => StoredBody::Problem(problem_type(&take(&mut buf, 2)?)?),
        _ => return Err(RecordError("bad body tag")),
    };
    if !buf.is_empty() {
        return Err(RecordError("trailing bytes"));
    }
    Ok(CompletedRecord {
        fingerprint,
        token,
        created_at,
        status,
        headers,
        body,
    })
}

/// What [`encode_headers`] wrote: the header count and the headers that follow it. The values
/// are slices of `buf`; the names are read in place, since most are names `http` knows and are
/// not stored at all.
fn decode_headers(buf: &mut Bytes) -> Result<HeaderMap, RecordError> {
    need(buf, 2)?;
    let count = buf.get_u16() as usize;
    // The count is untrusted: every header takes at least 6 bytes, and a map has a maximum size.
    let too_many = |_| RecordError("too many headers");
    let mut headers =
        HeaderMap::try_with_capacity(count.min(buf.remaining() / 6)).map_err(too_many)?;
    // Each name's values together: as many runs of one name as names. Counted rather than
    // looked up per header, and each name moved into the map rather than kept: a clone of a
    // name `http` does not know allocates, and a replay decodes every time.
    let whole = buf.clone();
    let (mut previous, mut runs) = (0..0, 0);
    for _ in 0..count {
        need(buf, 2)?;
        let len = buf.get_u16() as usize;
        need(buf, len)?;
        let at = whole.len() - buf.len();
        buf.advance(len);
        let raw = &whole[at..at + len];
        let name = HeaderName::from_bytes(raw).map_err(|_| RecordError("bad header name"))?;
        // Only the encoding `encode` writes is accepted: lower-case names, each name's values
        // together. Anything else would decode to a record that encodes to other bytes.
        if name.as_str().as_bytes() != raw {
            return Err(RecordError("header name not lower-case"));
        }
        if runs == 0 || raw != &whole[previous.clone()] {
            runs += 1;
        }
        previous = at..at + len;
        let value = take(buf, 4)?;
        let value =
            HeaderValue::from_maybe_shared(value).map_err(|_| RecordError("bad header value"))?;
        headers.try_append(name, value).map_err(too_many)?;
    }
    if headers.keys_len() != runs {
        return Err(RecordError("header values not together"));
    }
    Ok(headers)
}

/// Takes a length-prefixed field; `width` is the size of the prefix in bytes (2 or 4).
pub(super) fn take(buf: &mut Bytes, width: usize) -> Result<Bytes, RecordError> {
    need(buf, width)?;
    let len = if width == 2 {
        buf.get_u16() as usize
    } else {
        buf.get_u32() as usize
    };
    need(buf, len)?;
    Ok(buf.split_to(len))
}

pub(super) fn need(buf: &Bytes, len: usize) -> Result<(), RecordError> {
    if buf.remaining() < len {
        return Err(RecordError("truncated"));
    }
    Ok(())
}

/// A problem type as the proxy names them: lower-case letters and `-`.
fn problem_type(raw: &[u8]) -> Result<String, RecordError> {
    let valid = |b: &u8| b.is_ascii_lowercase() || *b == b'-';
    if raw.is_empty() || raw.len() > MAX_PROBLEM_LEN || !raw.iter().all(valid) {
        return Err(RecordError("bad problem type"));
    }
    Ok(String::from_utf8_lossy(raw).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn completed(body: StoredBody) -> CompletedRecord {
        let mut headers = HeaderMap::new();
        headers.append("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-multi", HeaderValue::from_static("a"));
        headers.append("x-multi", HeaderValue::from_static("b"));
        CompletedRecord {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            token: FencingToken::from_u64(42),
            created_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            status: StatusCode::CREATED,
            headers,
            body,
        }
    }

    #[test]
    fn completed_round_trips_with_repeated_headers() {
        for body in [
            StoredBody::Kept(Bytes::from_static(b"{\"id\":1}")),
            StoredBody::Kept(Bytes::new()),
            StoredBody::NotKept,
            StoredBody::Problem("upstream-timeout".into()),
            StoredBody::KeptWithTrailers {
                body: Bytes::from_static(b"\0\0\0\0\x02\x08\x01"),
                trailers: Box::new(trailers()),
            },
            StoredBody::KeptWithTrailers {
                body: Bytes::new(),
                trailers: Box::default(),
            },
        ] {
            let record = completed(body);
            let decoded = Record::decode(record.encode()).unwrap();
            assert_eq!(decoded, Record::Completed(record));
        }
    }

    #[test]
    fn in_flight_encoding_starts_with_the_token_prefix() {
        let token = FencingToken::from_u64(0xDEAD_BEEF);
        let record = Record::InFlight(InFlightRecord {
            fingerprint: Fingerprint::from_bytes([1; 32]),
            token,
            created_at: UNIX_EPOCH + Duration::from_millis(5),
        });
        let encoded = record.encode();
        assert!(encoded.starts_with(&token.in_flight_prefix()));
        assert_eq!(Record::decode(encoded).unwrap(), record);
    }

    #[test]
    fn every_truncation_is_reported_as_corrupt() {
        let encoded =
            Record::Completed(completed(StoredBody::Kept(Bytes::from_static(b"body")))).encode();
        for len in 0..encoded.len() {
            assert!(
                Record::decode(encoded.slice(..len)).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
        let mut longer = encoded.to_vec();
        longer.push(0);
        assert!(Record::decode(Bytes::from(longer)).is_err());
    }

    #[test]
    fn a_huge_header_count_is_corrupt_not_a_panic() {
        // Found by fuzzing: 65535 headers claimed in a short record made the map allocation panic.
        let mut raw = Record::Completed(completed(StoredBody::NotKept))
            .encode()
            .to_vec();
        raw[52..54].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(
            Record::decode(Bytes::from(raw)),
            Err(RecordError("truncated"))
        );
        let mut raw = Record::Completed(completed(StoredBody::NotKept)).encode()[..50].to_vec();
        raw.extend_from_slice(&200u16.to_be_bytes());
        raw.extend_from_slice(&40_000u16.to_be_bytes());
        for n in 0..40_000u32 {
            let name = format!("h{n}");
            raw.extend_from_slice(&(name.len() as u16).to_be_bytes());
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(&0u32.to_be_bytes());
        }
        raw.push(BODY_NOT_KEPT);
        assert_eq!(
            Record::decode(Bytes::from(raw)),
            Err(RecordError("too many headers"))
        );
    }

    #[test]
    fn only_the_canonical_header_encoding_decodes() {
        // Found by fuzzing: `Content-Type` decoded as `content-type`, and `a, b, a` as
        // `a, a, b`, so the record re-encoded to other bytes than were stored.
        let encode = |headers: &[(&str, &str)]| {
            let mut raw = Record::Completed(completed(StoredBody::NotKept)).encode()[..50].to_vec();
            raw.extend_from_slice(&200u16.to_be_bytes());
            raw.extend_from_slice(&(headers.len() as u16).to_be_bytes());
            for (name, value) in headers {
                raw.extend_from_slice(&(name.len() as u16).to_be_bytes());
                raw.extend_from_slice(name.as_bytes());
                raw.extend_from_slice(&(value.len() as u32).to_be_bytes());
                raw.extend_from_slice(value.as_bytes());
            }
            raw.push(BODY_NOT_KEPT);
            Bytes::from(raw)
        };
        let canonical = encode(&[("x-a", "1"), ("x-a", "2"), ("x-b", "3")]);
        assert_eq!(
            Record::decode(canonical.clone()).unwrap().encode(),
            canonical
        );
        assert_eq!(
            Record::decode(encode(&[("Content-Type", "text/plain")])),
            Err(RecordError("header name not lower-case"))
        );
        assert_eq!(
            Record::decode(encode(&[("x-a", "1"), ("x-b", "3"), ("x-a", "2")])),
            Err(RecordError("header values not together"))
        );
    }

    /// A record as the encoder wrote it before part digests existed, field by field: token 42,
    /// fingerprint `[7; 32]`, then `rest`.
    fn stored_before_part_digests(state: u8, rest: &[u8]) -> Bytes {
        let mut raw = vec![1, state];
        raw.extend_from_slice(&42u64.to_be_bytes());
        raw.extend_from_slice(&[7; 32]);
        raw.extend_from_slice(&1_700_000_000_123u64.to_be_bytes());
        raw.extend_from_slice(rest);
        Bytes::from(raw)
    }

    #[test]
    fn records_stored_before_part_digests_decode_with_their_parts_unknown() {
        let in_flight = stored_before_part_digests(STATE_IN_FLIGHT, &[]);
        // Status 201, no headers, a kept body of two bytes.
        let completed = stored_before_part_digests(
            STATE_COMPLETED,
            &[0, 201, 0, 0, BODY_KEPT, 0, 0, 0, 2, b'o', b'k'],
        );
        for raw in [in_flight, completed] {
            let record = Record::decode(raw.clone()).unwrap();
            assert_eq!(record.fingerprint(), &Fingerprint::from_bytes([7; 32]));
            assert!(record.fingerprint().parts().is_none());
            assert_eq!(record.encode(), raw, "encodes back to the same bytes");
        }
    }

    fn trailers() -> HeaderMap {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("9"));
        trailers.insert("grpc-message", HeaderValue::from_static("no%20funds"));
        let details = HeaderValue::from_static("CAkSCG5vIGZ1bmRz");
        trailers.insert("grpc-status-details-bin", details);
        trailers
    }

    #[test]
    fn records_stored_before_trailers_were_kept_decode_as_they_were_written() {
        // Status 200, one header (`a: b`), a kept body of two bytes: the layout of every
        // completed record written before a body could carry trailers.
        let mut rest = vec![0, 200, 0, 1, 0, 1, b'a', 0, 0, 0, 1, b'b'];
        rest.extend_from_slice(&[BODY_KEPT, 0, 0, 0, 2, b'o', b'k']);
        let raw = stored_before_part_digests(STATE_COMPLETED, &rest);
        let Record::Completed(record) = Record::decode(raw.clone()).unwrap() else {
            panic!("a completed record")
        };
        assert_eq!(record.body, StoredBody::Kept(Bytes::from_static(b"ok")));
        assert_eq!(record.headers["a"], "b");
        assert_eq!(Record::Completed(record).encode(), raw);
        // The same answer with trailers takes a tag of its own after the same headers.
        let mut with = completed(StoredBody::KeptWithTrailers {
            body: Bytes::from_static(b"ok"),
            trailers: Box::new(trailers()),
        });
        with.fingerprint = Fingerprint::from_bytes([7; 32]);
        let encoded = Record::Completed(with.clone()).encode();
        let tag_at = encoded.len() - 1 - (4 + 2) - headers_len(&trailers());
        assert_eq!(encoded[tag_at], BODY_KEPT_WITH_TRAILERS);
        assert_eq!(Record::decode(encoded).unwrap(), Record::Completed(with));
    }

    fn with_parts() -> Fingerprint {
        let parts: [u8; PartDigests::STORED_LEN] = std::array::from_fn(|i| i as u8);
        Fingerprint::with_parts([7; 32], PartDigests::from_bytes(parts))
    }

    #[test]
    fn part_digests_follow_the_header_and_leave_the_fencing_prefix_alone() {
        let token = FencingToken::from_u64(0xDEAD_BEEF);
        let in_flight = Record::InFlight(InFlightRecord {
            fingerprint: with_parts(),
            token,
            created_at: UNIX_EPOCH + Duration::from_millis(5),
        });
        let encoded = in_flight.encode();
        assert!(encoded.starts_with(&token.in_flight_prefix()));
        assert_eq!(encoded.len(), HEADER_LEN + 1 + PartDigests::STORED_LEN);
        assert_eq!(encoded[HEADER_LEN], PART_DIGESTS);
        assert_eq!(Record::decode(encoded).unwrap(), in_flight);

        let mut completed = completed(StoredBody::Kept(Bytes::from_static(b"body")));
        completed.fingerprint = with_parts();
        let completed = Record::Completed(completed);
        let encoded = completed.encode();
        assert_eq!(Record::decode(encoded.clone()).unwrap(), completed);
        for len in HEADER_LEN + 1..encoded.len() {
            assert!(Record::decode(encoded.slice(..len)).is_err(), "{len} bytes");
        }
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Record::decode(Bytes::from(raw));
        }

        #[test]
        fn any_body_round_trips(body in proptest::collection::vec(any::<u8>(), 0..2048), status in 100u16..600) {
            let mut record = completed(StoredBody::Kept(Bytes::from(body)));
            record.status = StatusCode::from_u16(status).unwrap();
            let record = Record::Completed(record);
            prop_assert_eq!(Record::decode(record.encode()).unwrap(), record);
        }
    }
}
