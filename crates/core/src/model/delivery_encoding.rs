//! The binary encoding every store keeps deliveries in.
//!
//! One version byte, then the fields in a fixed order, each length-prefixed where it varies:
//! id, arrival, attempts, last status and error, the scoped key (route, optional client scope,
//! key), then the request (method, target, headers, body). Decoding is strict in the same way
//! records are: anything that does not parse to the last byte is corrupt, never a panic and
//! never half a delivery.

use std::time::{Duration, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use super::clock::unix_millis;
use super::delivery::{Delivery, DeliveryId, StoredRequest};
use super::encoding::{need, take, RecordError};
use super::key::{ClientScope, IdempotencyKey, RouteName, ScopedKey};

const VERSION: u8 = 1;
const ABSENT: u8 = 0;
const PRESENT: u8 = 1;
/// The longest error text kept on a delivery; longer ones are cut when encoded.
pub const MAX_ERROR_LEN: usize = 512;

impl Delivery {
    /// The delivery's bytes as every store keeps them.
    pub fn encode(&self) -> Bytes {
        let request = &self.request;
        let mut buf = BytesMut::with_capacity(128 + request.target.len() + request.body.len());
        buf.put_u8(VERSION);
        buf.put_slice(self.id.as_bytes());
        buf.put_u64(unix_millis(self.received_at));
        buf.put_u32(self.attempts);
        buf.put_u16(self.last_status.map_or(0, |s| s.as_u16()));
        put_error(&mut buf, self.last_error.as_deref());
        put_key(&mut buf, &self.key);
        put_request(&mut buf, request);
        buf.freeze()
    }

    /// Decodes a delivery; its body shares `bytes` rather than copying.
    pub fn decode(bytes: Bytes) -> Result<Self, RecordError> {
        let mut buf = bytes;
        need(&buf, 1 + DeliveryId::LEN + 8 + 4 + 2)?;
        if buf.get_u8() != VERSION {
            return Err(RecordError::new("unknown delivery version"));
        }
        let mut id = [0u8; DeliveryId::LEN];
        buf.copy_to_slice(&mut id);
        let received_at = UNIX_EPOCH + Duration::from_millis(buf.get_u64());
        let attempts = buf.get_u32();
        let last_status = match buf.get_u16() {
            0 => None,
            code => Some(StatusCode::from_u16(code).map_err(|_| bad("bad status"))?),
        };
        let last_error = take_error(&mut buf)?;
        let key = take_key(&mut buf)?;
        let request = take_request(&mut buf)?;
        if !buf.is_empty() {
            return Err(bad("trailing bytes"));
        }
        Ok(Self {
            id: DeliveryId::from_bytes(id),
            key,
            request,
            received_at,
            attempts,
            last_status,
            last_error,
        })
    }
}

fn bad(why: &'static str) -> RecordError {
    RecordError::new(why)
}

fn put_error(buf: &mut BytesMut, error: Option<&str>) {
    let Some(error) = error else {
        return buf.put_u8(ABSENT);
    };
    let mut end = error.len().min(MAX_ERROR_LEN);
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    buf.put_u8(PRESENT);
    buf.put_u16(end as u16);
    buf.put_slice(&error.as_bytes()[..end]);
}

fn take_error(buf: &mut Bytes) -> Result<Option<String>, RecordError> {
    need(buf, 1)?;
    match buf.get_u8() {
        ABSENT => Ok(None),
        PRESENT => {
            let error = text(&take(buf, 2)?)?;
            // Longer ones are cut when encoded, so a longer one was never written.
            if error.len() > MAX_ERROR_LEN {
                return Err(bad("error text too long"));
            }
            Ok(Some(error))
        }
        _ => Err(bad("bad error tag")),
    }
}

fn text(raw: &[u8]) -> Result<String, RecordError> {
    String::from_utf8(raw.to_vec()).map_err(|_| bad("text is not UTF-8"))
}

fn put_key(buf: &mut BytesMut, key: &ScopedKey) {
    let route = key.route().as_str();
    buf.put_u16(route.len() as u16);
    buf.put_slice(route.as_bytes());
    match key.scope() {
        Some(scope) => {
            buf.put_u8(PRESENT);
            buf.put_slice(scope.digest());
        }
        None => buf.put_u8(ABSENT),
    }
    let raw = key.key().as_str();
    buf.put_u16(raw.len() as u16);
    buf.put_slice(raw.as_bytes());
}

fn take_key(buf: &mut Bytes) -> Result<ScopedKey, RecordError> {
    let route = RouteName::new(text(&take(buf, 2)?)?).map_err(|_| bad("bad route name"))?;
    need(buf, 1)?;
    let scope = match buf.get_u8() {
        ABSENT => None,
        PRESENT => {
            need(buf, 32)?;
            let mut digest = [0u8; 32];
            buf.copy_to_slice(&mut digest);
            Some(ClientScope::from_digest(digest))
        }
        _ => return Err(bad("bad scope tag")),
    };
    let key = IdempotencyKey::new(text(&take(buf, 2)?)?).map_err(|_| bad("bad key"))?;
    Ok(ScopedKey::new(route, scope, key))
}

fn put_request(buf: &mut BytesMut, request: &StoredRequest) {
    let method = request.method.as_str();
    buf.put_u16(method.len() as u16);
    buf.put_slice(method.as_bytes());
    buf.put_u32(request.target.len() as u32);
    buf.put_slice(request.target.as_bytes());
    buf.put_u16(request.headers.len() as u16);
    for (name, value) in &request.headers {
        buf.put_u16(name.as_str().len() as u16);
        buf.put_slice(name.as_str().as_bytes());
        buf.put_u32(value.len() as u32);
        buf.put_slice(value.as_bytes());
    }
    buf.put_u32(request.body.len() as u32);
    buf.put_slice(&request.body);
}

fn take_request(buf: &mut Bytes) -> Result<StoredRequest, RecordError> {
    let method = Method::from_bytes(&take(buf, 2)?).map_err(|_| bad("bad method"))?;
    let target = text(&take(buf, 4)?)?;
    need(buf, 2)?;
    let count = buf.get_u16() as usize;
    // The count is untrusted: every header takes at least 6 bytes.
    let too_many = |_| bad("too many headers");
    let mut headers =
        HeaderMap::try_with_capacity(count.min(buf.remaining() / 6)).map_err(too_many)?;
    for _ in 0..count {
        let name = HeaderName::from_bytes(&take(buf, 2)?).map_err(|_| bad("bad header name"))?;
        let value =
            HeaderValue::from_maybe_shared(take(buf, 4)?).map_err(|_| bad("bad header value"))?;
        headers.try_append(name, value).map_err(too_many)?;
    }
    let body = take(buf, 4)?;
    Ok(StoredRequest {
        method,
        target,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::SystemTime;

    fn delivery(body: Vec<u8>, scoped: bool, last_error: Option<String>) -> Delivery {
        let scope = scoped.then(|| ClientScope::from_secret(b"Bearer x"));
        let key = IdempotencyKey::new("evt_1:a").unwrap();
        let key = ScopedKey::new(RouteName::new("hooks").unwrap(), scope, key);
        let mut headers = HeaderMap::new();
        headers.append("content-type", HeaderValue::from_static("application/json"));
        headers.append("x-multi", HeaderValue::from_static("a"));
        headers.append("x-multi", HeaderValue::from_static("b"));
        let request = StoredRequest {
            method: Method::POST,
            target: "/hooks/github?x=1".into(),
            headers,
            body: Bytes::from(body),
        };
        Delivery {
            id: DeliveryId::generate(SystemTime::now()),
            key,
            request,
            received_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            attempts: 3,
            last_status: Some(StatusCode::INTERNAL_SERVER_ERROR),
            last_error,
        }
    }

    #[test]
    fn a_delivery_round_trips_and_every_truncation_is_corrupt() {
        let whole = delivery(b"{\"a\":1}".to_vec(), true, Some("status 500".into()));
        let encoded = whole.encode();
        assert_eq!(Delivery::decode(encoded.clone()).unwrap(), whole);
        for len in 0..encoded.len() {
            assert!(
                Delivery::decode(encoded.slice(..len)).is_err(),
                "{len} bytes"
            );
        }
        let mut longer = encoded.to_vec();
        longer.push(0);
        assert!(Delivery::decode(Bytes::from(longer)).is_err());
    }

    #[test]
    fn a_long_error_is_cut_on_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_LEN);
        let decoded = Delivery::decode(delivery(vec![], false, Some(long)).encode()).unwrap();
        let kept = decoded.last_error.unwrap();
        assert!(kept.len() <= MAX_ERROR_LEN && kept.len() >= MAX_ERROR_LEN - 1);
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Delivery::decode(Bytes::from(raw));
        }

        #[test]
        fn any_delivery_round_trips(
            body in proptest::collection::vec(any::<u8>(), 0..2048),
            scoped in any::<bool>(),
            error in proptest::option::of("[ -~]{0,80}"),
            attempts in any::<u32>(),
        ) {
            let mut whole = delivery(body, scoped, error);
            whole.attempts = attempts;
            prop_assert_eq!(Delivery::decode(whole.encode()).unwrap(), whole);
        }
    }
}

#[cfg(test)]
mod mutations {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a damaged delivery decodes to survives its own encoding.
        #[test]
        fn a_mutated_delivery_decodes_to_one_that_round_trips(at in 0usize..200, byte in any::<u8>()) {
            let key = ScopedKey::new(RouteName::new("r").unwrap(), None, IdempotencyKey::new("k").unwrap());
            let mut headers = HeaderMap::new();
            headers.insert("x-a", HeaderValue::from_static("1"));
            let request = StoredRequest { method: Method::POST, target: "/a".into(), headers, body: Bytes::from_static(b"{}") };
            let mut raw = Delivery::new(key, request).encode().to_vec();
            let at = at % raw.len();
            raw[at] = byte;
            if let Ok(delivery) = Delivery::decode(Bytes::from(raw)) {
                prop_assert_eq!(Delivery::decode(delivery.encode()), Ok(delivery));
            }
        }
    }
}
