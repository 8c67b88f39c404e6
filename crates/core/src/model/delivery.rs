//! Inbox deliveries (docs/reference.md#inbox-routes): a request an inbox route acknowledged and now owes its
//! upstream, with what its attempts so far came to.
//!
//! A delivery carries its scoped key (whose parsed key is sent upstream as `Idempotency-Key`)
//! and the stored request, both of which a sealing store encrypts, beside what an operator
//! looks at (attempts, last status and error, when it arrived), which stays in clear so a
//! store can update it without opening anything.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};

use super::clock::unix_millis;
use super::key::ScopedKey;
use super::token::FencingToken;

/// Names one delivery: the millisecond it arrived, then 8 random bytes. Its text form is 32
/// lower-case hex digits, so ids sort by arrival both as bytes and as text, which is what
/// paging a list of dead deliveries (`?after=<id>`) relies on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryId([u8; 16]);

impl DeliveryId {
    /// The id's length in bytes.
    pub const LEN: usize = 16;

    /// A fresh id for a delivery received at `at`.
    pub fn generate(at: SystemTime) -> Self {
        let mut raw = [0u8; Self::LEN];
        raw[..8].copy_from_slice(&unix_millis(at).to_be_bytes());
        raw[8..].copy_from_slice(&FencingToken::generate().as_u64().to_be_bytes());
        Self(raw)
    }

    /// The id with these bytes (as stored).
    pub fn from_bytes(raw: [u8; Self::LEN]) -> Self {
        Self(raw)
    }

    /// The id's bytes, as stored.
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeliveryId({self})")
    }
}

/// A text that is not a delivery id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a delivery id is 32 lower-case hex digits")]
pub struct BadDeliveryId;

impl FromStr for DeliveryId {
    type Err = BadDeliveryId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // Only the form Display writes, so one id has one spelling.
        let canonical = text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let mut raw = [0u8; Self::LEN];
        match hex::decode_to_slice(text, &mut raw) {
            Ok(()) if canonical => Ok(Self(raw)),
            _ => Err(BadDeliveryId),
        }
    }
}

/// The request an inbox route acknowledged, as it is sent upstream on every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    /// The method the sender used.
    pub method: Method,
    /// Path and query, as the sender sent them.
    pub target: String,
    /// The end-to-end headers (hop-by-hop ones are never stored).
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

/// One acknowledged request and how its delivery has gone so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// What the acknowledgement named.
    pub id: DeliveryId,
    /// The scoped key it was acknowledged under; its parsed key is sent upstream.
    pub key: ScopedKey,
    /// What is sent upstream.
    pub request: StoredRequest,
    /// When the sender's request was acknowledged.
    pub received_at: SystemTime,
    /// Attempts started so far (a store counts one as it hands the delivery out).
    pub attempts: u32,
    /// The upstream's status on the last attempt that got one.
    pub last_status: Option<StatusCode>,
    /// Why the last attempt failed, in words (no secrets: a status, a time-out, a refusal).
    pub last_error: Option<String>,
}

impl Delivery {
    /// A delivery of `request`, received now under `key`, not attempted yet.
    pub fn new(key: ScopedKey, request: StoredRequest) -> Self {
        let received_at = SystemTime::now();
        Self {
            id: DeliveryId::generate(received_at),
            key,
            request,
            received_at,
            attempts: 0,
            last_status: None,
            last_error: None,
        }
    }
}

/// What an attempt came to, when it did not deliver: stored on the delivery for an operator.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptFailure {
    /// The upstream's status, if it answered.
    pub status: Option<StatusCode>,
    /// Why it failed, in words.
    pub error: Option<String>,
}

/// An inbox route's queues (docs/reference.md#inbox-routes), as `GET /inbox/{route}` and the status page
/// report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct InboxQueues {
    /// Deliveries waiting for their next attempt.
    pub pending: u64,
    /// Deliveries being attempted now.
    pub in_flight: u64,
    /// Deliveries that ran out of attempts or age, kept for an operator.
    pub dead: u64,
    /// How long the oldest delivery not yet delivered (pending or in flight) has waited, to
    /// the millisecond; shown as `oldest_pending_seconds`, fractional seconds.
    #[serde(
        rename = "oldest_pending_seconds",
        serialize_with = "idempotency_delivery::fractional_seconds::serialize"
    )]
    pub oldest_pending: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_back_from_their_text_and_sort_by_arrival() {
        let early = DeliveryId::generate(SystemTime::UNIX_EPOCH);
        let late = DeliveryId::generate(SystemTime::now());
        assert!(early < late);
        assert!(early.to_string() < late.to_string());
        assert_eq!(late.to_string().parse::<DeliveryId>(), Ok(late));
        for bad in [
            "",
            "xyz",
            "ABCDEF0123456789ABCDEF0123456789",
            &late.to_string()[1..],
        ] {
            assert_eq!(bad.parse::<DeliveryId>(), Err(BadDeliveryId), "{bad:?}");
        }
    }
}
