//! What the proxy did with a request (the outcomes of docs/reference.md#metrics), as metrics, logs and the
//! status page name it.

use std::fmt;

/// What the proxy did with a request, as named in metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum RequestOutcome {
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

impl RequestOutcome {
    /// The name metrics and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Forwarded => "forwarded",
            RequestOutcome::Replayed => "replayed",
            RequestOutcome::Conflict => "conflict",
            RequestOutcome::Mismatch => "mismatch",
            RequestOutcome::Rejected => "rejected",
            RequestOutcome::Released => "released",
            RequestOutcome::Bypassed => "bypassed",
        }
    }
}

impl fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every outcome, in the order of their discriminants.
pub const OUTCOMES: [RequestOutcome; 7] = [
    RequestOutcome::Forwarded,
    RequestOutcome::Replayed,
    RequestOutcome::Conflict,
    RequestOutcome::Mismatch,
    RequestOutcome::Rejected,
    RequestOutcome::Released,
    RequestOutcome::Bypassed,
];
