//! What the layer needs to know of gRPC's wire format (docs/grpc.md): status codes, where a call
//! states its status and its deadline, and how many length-prefixed messages a body holds.
//!
//! The proxy has no `.proto`: a call is a `POST` of length-prefixed messages, answered by
//! headers, messages and trailers. Everything here reads only that framing.

use std::time::Duration;

use http::{HeaderMap, HeaderName};
use serde::{Deserialize, Serialize};

/// What a route speaks to its clients and its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// HTTP/1.1 or HTTP/2 requests, upstream over pooled HTTP/1.1 connections.
    #[default]
    Http,
    /// gRPC calls, upstream over one multiplexed HTTP/2 connection.
    Grpc,
}

/// A gRPC status code (`grpc-status`), 0 to 16 for the ones gRPC defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GrpcCode(pub u32);

impl GrpcCode {
    /// The call succeeded.
    pub const OK: Self = Self(0);
    /// The request was malformed (a bad key, a missing one).
    pub const INVALID_ARGUMENT: Self = Self(3);
    /// Not found (a record or a delivery an operator named).
    pub const NOT_FOUND: Self = Self(5);
    /// A limit was exceeded (the request body).
    pub const RESOURCE_EXHAUSTED: Self = Self(8);
    /// The call does not fit the state kept for its key.
    pub const FAILED_PRECONDITION: Self = Self(9);
    /// Another call with the key is running.
    pub const ABORTED: Self = Self(10);
    /// No such method here: what a gRPC server answers a call it has no handler for, and the
    /// proxy a call no route takes.
    pub const UNIMPLEMENTED: Self = Self(12);
    /// Something the proxy has no better status for.
    pub const INTERNAL: Self = Self(13);
    /// The service could not be reached; retrying is safe.
    pub const UNAVAILABLE: Self = Self(14);
    /// The call's credentials were refused.
    pub const UNAUTHENTICATED: Self = Self(16);

    /// The code as `grpc-status` writes it.
    pub fn as_u32(self) -> u32 {
        self.0
    }
}

/// Put on a response by the layer of a gRPC route: the proxy's own answer to it is rendered as
/// a trailers-only gRPC error rather than a problem document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcCall;

/// Whether a request is a gRPC call by its `content-type`: `application/grpc`, alone or with a
/// `+` subtype (`application/grpc+proto`) or parameters, as gRPC's HTTP/2 protocol names it.
/// gRPC-Web (`application/grpc-web`) is another protocol, which the proxy does not speak.
pub fn is_call(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return false;
    };
    let value = value.as_bytes();
    let grpc = b"application/grpc";
    value.len() >= grpc.len()
        && value[..grpc.len()].eq_ignore_ascii_case(grpc)
        && matches!(value.get(grpc.len()), None | Some(b'+' | b';'))
}

pub(crate) static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub(crate) static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The call's status: in the trailers, or in the headers of a trailers-only answer.
pub(crate) fn status_of(headers: &HeaderMap, trailers: Option<&HeaderMap>) -> Option<GrpcCode> {
    let value = trailers
        .and_then(|t| t.get(&GRPC_STATUS))
        .or_else(|| headers.get(&GRPC_STATUS))?;
    value.to_str().ok()?.parse().ok().map(GrpcCode)
}

/// The deadline a client set with `grpc-timeout` (at most 8 digits, then `H`, `M`, `S`, `m`,
/// `u` or `n`); `None` when there is none or it cannot be read.
pub(crate) fn timeout_of(headers: &HeaderMap) -> Option<Duration> {
    let raw = headers.get(&GRPC_TIMEOUT)?.to_str().ok()?;
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Counts the length-prefixed messages of a body as its bytes arrive (a flag byte, a 4-byte
/// big-endian length, the message).
#[derive(Debug, Clone, Default)]
pub(crate) struct MessageCounter {
    /// Prefix bytes of the current message read so far (0 to 5).
    prefix_read: usize,
    prefix: [u8; 5],
    /// Bytes of the current message still to come.
    remaining: usize,
    /// Messages begun.
    begun: usize,
}

impl MessageCounter {
    /// Reads the next bytes of the body.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let step = self.remaining.min(bytes.len());
                self.remaining -= step;
                bytes = &bytes[step..];
                continue;
            }
            if self.prefix_read == 0 {
                self.begun += 1;
            }
            self.prefix[self.prefix_read] = bytes[0];
            self.prefix_read += 1;
            bytes = &bytes[1..];
            if self.prefix_read == 5 {
                let len = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]);
                self.remaining = len as usize;
                self.prefix_read = 0;
            }
        }
    }

    /// Messages begun so far.
    pub(crate) fn begun(&self) -> usize {
        self.begun
    }

    /// Whether the bytes so far end on a message's last byte (or hold none).
    pub(crate) fn is_complete(&self) -> bool {
        self.prefix_read == 0 && self.remaining == 0
    }
}

/// Whether a whole request body is one unary call's: exactly one complete message.
pub(crate) fn is_single_message(body: &[u8]) -> bool {
    let mut counter = MessageCounter::default();
    counter.feed(body);
    counter.begun() == 1 && counter.is_complete()
}

/// `text` as `grpc-message` carries it: percent-encoded outside printable ASCII, and `%`.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn a_call_is_told_by_its_content_type() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(value));
            is_call(&headers)
        };
        for call in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC+json",
            "application/grpc; charset=utf-8",
        ] {
            assert!(with(call), "{call}");
        }
        for other in [
            "application/grpc-web",
            "application/grpcx",
            "application/json",
            "application/gr",
        ] {
            assert!(!with(other), "{other}");
        }
        assert!(!is_call(&HeaderMap::new()));
    }

    fn message(len: usize) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&(len as u32).to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len));
        m
    }

    #[test]
    fn messages_are_counted_across_any_split() {
        let mut body = message(3);
        body.extend(message(0));
        body.extend(message(300));
        for split in 0..body.len() {
            let mut counter = MessageCounter::default();
            counter.feed(&body[..split]);
            counter.feed(&body[split..]);
            assert_eq!(counter.begun(), 3, "split at {split}");
            assert!(counter.is_complete());
        }
        assert!(is_single_message(&message(10)));
        assert!(!is_single_message(&body));
        assert!(!is_single_message(&message(10)[..8]));
        assert!(!is_single_message(b""));
    }

    #[test]
    fn deadlines_read_every_unit_and_refuse_the_rest() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert("grpc-timeout", HeaderValue::from_static(v));
            timeout_of(&h)
        };
        assert_eq!(with("250m"), Some(Duration::from_millis(250)));
        assert_eq!(with("2S"), Some(Duration::from_secs(2)));
        assert_eq!(with("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(with("999999999S"), None);
        assert_eq!(with("m"), None);
        assert_eq!(with("5x"), None);
    }

    #[test]
    fn the_status_is_in_the_trailers_or_a_trailers_only_head() {
        let mut head = HeaderMap::new();
        assert_eq!(status_of(&head, None), None);
        head.insert("grpc-status", HeaderValue::from_static("14"));
        assert_eq!(status_of(&head, None), Some(GrpcCode::UNAVAILABLE));
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        assert_eq!(status_of(&head, Some(&trailers)), Some(GrpcCode::OK));
        assert_eq!(percent_encode("a%b\né"), "a%25b%0A%C3%A9");
    }
}
