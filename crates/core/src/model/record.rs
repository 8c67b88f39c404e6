//! What a store holds for a scoped key (docs/reference.md#words): a request still running (`in_flight`),
//! or its outcome (`completed`).

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

use super::fingerprint::Fingerprint;
use super::token::FencingToken;

/// A request that has been let through and whose outcome is not known yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightRecord {
    /// What the request asked for.
    pub fingerprint: Fingerprint,
    /// The holder of the reservation.
    pub token: FencingToken,
    /// When the reservation was made.
    pub created_at: SystemTime,
}

impl InFlightRecord {
    /// The record a new reservation writes, under a fresh token.
    pub fn fresh(fingerprint: Fingerprint) -> (FencingToken, Record) {
        let token = FencingToken::generate();
        let record = Record::InFlight(InFlightRecord {
            fingerprint,
            token,
            created_at: SystemTime::now(),
        });
        (token, record)
    }
}

/// The response body as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// Kept byte for byte.
    Kept(Bytes),
    /// Kept byte for byte, with the trailers that followed it (a gRPC call's status).
    KeptWithTrailers {
        /// The body's bytes.
        body: Bytes,
        /// The trailers, as the upstream sent them. Boxed: a header map is 96 bytes, which
        /// every record would otherwise carry.
        trailers: Box<HeaderMap>,
    },
    /// Too large to keep: a duplicate gets `410 response-not-kept`.
    NotKept,
    /// The proxy's own problem answer (an ambiguous upstream failure kept as the outcome), by
    /// its problem type, such as `upstream-timeout`. It is rendered as `problem+json` each time
    /// it is sent, by the same code that rendered the first answer.
    Problem(String),
}

/// A request whose outcome is known: what the upstream (or the proxy) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedRecord {
    /// What the request asked for.
    pub fingerprint: Fingerprint,
    /// The holder whose completion this was.
    pub token: FencingToken,
    /// When the outcome was recorded.
    pub created_at: SystemTime,
    /// The answer's status.
    pub status: StatusCode,
    /// The answer's storable headers (no hop-by-hop headers, `Set-Cookie` or `Date`).
    pub headers: HeaderMap,
    /// The answer's body.
    pub body: StoredBody,
}

impl CompletedRecord {
    /// A copy that owns its bytes. The body and header values of an upstream answer are slices
    /// of the connection's read buffer; a record kept for its TTL (in memory, or in the replay
    /// cache) would keep that whole buffer (8 KiB or more) alive, where the answer itself is
    /// often a few hundred bytes.
    ///
    /// The values and the body are copied into one buffer of their own and become slices of
    /// it: two allocations, where a copy per value took one each and then one more per value
    /// the first time the record was cloned (into the memory store or the replay cache), when
    /// each copy became shareable.
    pub fn detached(mut self) -> Self {
        let body: &[u8] = match &self.body {
            StoredBody::Kept(bytes) | StoredBody::KeptWithTrailers { body: bytes, .. } => bytes,
            _ => &[],
        };
        let values_len: usize = self.headers.values().map(HeaderValue::len).sum();
        let mut owned = Vec::with_capacity(values_len + body.len());
        for value in self.headers.values() {
            owned.extend_from_slice(value.as_bytes());
        }
        owned.extend_from_slice(body);
        let owned = Bytes::from(owned);
        let mut at = 0;
        for value in self.headers.values_mut() {
            let piece = owned.slice(at..at + value.len());
            at += value.len();
            *value = detached_value(value, piece);
        }
        match &mut self.body {
            StoredBody::Kept(bytes) | StoredBody::KeptWithTrailers { body: bytes, .. } => {
                *bytes = owned.slice(at..);
            }
            StoredBody::NotKept | StoredBody::Problem(_) => {}
        }
        self
    }

    /// The bytes the body and headers take, to weigh the record in a cache.
    pub fn payload_len(&self) -> usize {
        let body = match &self.body {
            StoredBody::Kept(body) => body.len(),
            StoredBody::KeptWithTrailers { body, trailers } => body.len() + headers_len(trailers),
            StoredBody::NotKept => 0,
            StoredBody::Problem(kind) => kind.len(),
        };
        body + headers_len(&self.headers)
    }
}

fn headers_len(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum()
}

/// `value` as `piece`, its bytes in the record's own buffer.
fn detached_value(value: &HeaderValue, piece: Bytes) -> HeaderValue {
    match HeaderValue::from_maybe_shared(piece) {
        Ok(mut copy) => {
            copy.set_sensitive(value.is_sensitive());
            copy
        }
        Err(_) => value.clone(),
    }
}

/// A stored record in either state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The first request is still running.
    InFlight(InFlightRecord),
    /// The outcome is known.
    Completed(CompletedRecord),
}

impl Record {
    /// What the request that made the record asked for.
    pub fn fingerprint(&self) -> &Fingerprint {
        match self {
            Record::InFlight(r) => &r.fingerprint,
            Record::Completed(r) => &r.fingerprint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detached_record_does_not_keep_the_buffer_it_was_read_from() {
        let read_buffer = Bytes::from(vec![b'x'; 8192]);
        let within = |part: &[u8]| read_buffer.as_ptr_range().contains(&part.as_ptr());
        let value = HeaderValue::from_maybe_shared(read_buffer.slice(10..20)).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-id", value);
        let record = CompletedRecord {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            token: FencingToken::from_u64(42),
            created_at: SystemTime::now(),
            status: StatusCode::CREATED,
            headers,
            body: StoredBody::Kept(read_buffer.slice(100..150)),
        };
        let kept = record.clone().detached();
        assert_eq!(kept, record);
        let StoredBody::Kept(body) = &kept.body else {
            panic!("the body is kept")
        };
        assert!(!within(body));
        assert!(!within(kept.headers["x-id"].as_bytes()));
        assert_eq!(kept.payload_len(), 50 + "x-id".len() + 10);
    }

    #[test]
    fn detaching_keeps_every_value_in_order_and_its_sensitivity() {
        let mut headers = HeaderMap::new();
        headers.append("x-many", HeaderValue::from_static("first"));
        headers.append("x-many", HeaderValue::from_static(""));
        headers.append("x-many", HeaderValue::from_static("third"));
        let mut secret = HeaderValue::from_bytes(b"token \xff").unwrap();
        secret.set_sensitive(true);
        headers.insert("x-secret", secret);
        let bodies = [
            StoredBody::Kept(Bytes::from_static(b"{\"id\":1}")),
            StoredBody::Kept(Bytes::new()),
            StoredBody::NotKept,
            StoredBody::Problem("upstream-timeout".into()),
        ];
        for body in bodies {
            let record = CompletedRecord {
                fingerprint: Fingerprint::from_bytes([7; 32]),
                token: FencingToken::from_u64(42),
                created_at: SystemTime::now(),
                status: StatusCode::OK,
                headers: headers.clone(),
                body,
            };
            let kept = record.clone().detached();
            assert_eq!(kept, record);
            let many: Vec<_> = kept.headers.get_all("x-many").iter().collect();
            assert_eq!(many, ["first", "", "third"]);
            assert!(kept.headers["x-secret"].is_sensitive());
            assert!(!kept.headers["x-many"].is_sensitive());
        }
    }
}
