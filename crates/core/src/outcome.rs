//! What the proxy did with a request (the outcomes of docs/reference.md#metrics), as metrics, logs and the
//! status page name it.

use std::fmt;

/// What the proxy did with a request, as named in metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Outcome {
    /// First request with its key: sent upstream, outcome stored.
    Forwarded,
    /// Answered from the store.
    Replayed,
    /// Another request with the key was still in flight.
    Conflict,
    /// The key was used before for a different request.
    Mismatch,
    /// Refused by the proxy (missing or invalid key, body too large, store unavailable).
    Rejected,
    /// Sent upstream, then the key was freed (not executed, or ambiguous with `release`).
    Released,
    /// Sent upstream without deduplication (no key, method not covered, store failed open).
    Bypassed,
}

impl Outcome {
    /// The name metrics and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Forwarded => "forwarded",
            Outcome::Replayed => "replayed",
            Outcome::Conflict => "conflict",
            Outcome::Mismatch => "mismatch",
            Outcome::Rejected => "rejected",
            Outcome::Released => "released",
            Outcome::Bypassed => "bypassed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every outcome, in the order of their discriminants.
pub const OUTCOMES: [Outcome; 7] = [
    Outcome::Forwarded,
    Outcome::Replayed,
    Outcome::Conflict,
    Outcome::Mismatch,
    Outcome::Rejected,
    Outcome::Released,
    Outcome::Bypassed,
];
