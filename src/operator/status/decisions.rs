//! The last decisions of one route, kept in a fixed ring so that recording one never allocates.
//!
//! A decision holds nothing a client sent: the key is kept as its log id (a digest of the scoped
//! key), the same one the log lines carry, so an operator can find the matching line.

use std::sync::Mutex;

use idempotency_core::observe::Outcome;

/// How many decisions each route keeps; the page shows this many across all routes.
pub(crate) const KEPT_DECISIONS: usize = 100;

/// The longest key log id kept; the proxy's own are 12 hex digits.
const KEY_ID_LEN: usize = 16;

/// One finished request as the status page lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    /// When it finished, in milliseconds since the Unix epoch.
    pub(crate) at_ms: u64,
    pub(crate) outcome: Outcome,
    pub(crate) status: u16,
    /// On a gRPC route, the call's status where it is known (0 to 16, or whatever the
    /// upstream said, cut to a byte).
    pub(crate) grpc_status: Option<u8>,
    key_id: [u8; KEY_ID_LEN],
    key_id_len: u8,
}

impl Decision {
    pub(crate) fn new(at_ms: u64, outcome: Outcome, status: u16, key_id: Option<&str>) -> Self {
        let mut kept = [0; KEY_ID_LEN];
        // Only ASCII is kept, so the cut can never split a character.
        let id = key_id.map_or(&[][..], str::as_bytes);
        let len = id
            .iter()
            .take(KEY_ID_LEN)
            .take_while(|b| b.is_ascii())
            .count();
        kept[..len].copy_from_slice(&id[..len]);
        Self {
            at_ms,
            outcome,
            status,
            grpc_status: None,
            key_id: kept,
            key_id_len: u8::try_from(len).unwrap_or(0),
        }
    }

    /// The decision of a gRPC call whose status was `code`.
    pub(crate) fn with_grpc_status(mut self, code: Option<u32>) -> Self {
        self.grpc_status = code.map(|c| u8::try_from(c).unwrap_or(u8::MAX));
        self
    }

    /// The key's log id, if the request had a key.
    pub(crate) fn key_id(&self) -> Option<&str> {
        let id = &self.key_id[..usize::from(self.key_id_len)];
        std::str::from_utf8(id).ok().filter(|id| !id.is_empty())
    }
}

/// The last [`KEPT_DECISIONS`] decisions, oldest overwritten first.
#[derive(Debug)]
pub(crate) struct DecisionRing {
    // The lock is held only to copy one small value in or the whole ring out, and each route
    // has its own, so requests of different routes never wait for each other here.
    slots: Mutex<Ring>,
}

#[derive(Debug)]
struct Ring {
    entries: [Option<Decision>; KEPT_DECISIONS],
    next: usize,
}

impl Default for DecisionRing {
    fn default() -> Self {
        Self {
            slots: Mutex::new(Ring {
                entries: [None; KEPT_DECISIONS],
                next: 0,
            }),
        }
    }
}

impl DecisionRing {
    pub(crate) fn push(&self, decision: Decision) {
        let mut ring = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = ring.next;
        ring.entries[at] = Some(decision);
        ring.next = (at + 1) % KEPT_DECISIONS;
    }

    /// The kept decisions, in no particular order.
    pub(crate) fn copy_into(&self, out: &mut Vec<Decision>) {
        let ring = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.extend(ring.entries.iter().flatten());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_hundred() {
        let ring = DecisionRing::default();
        for at in 0..250 {
            ring.push(Decision::new(at, Outcome::Forwarded, 201, None));
        }
        let mut kept = Vec::new();
        ring.copy_into(&mut kept);
        let mut times: Vec<u64> = kept.iter().map(|d| d.at_ms).collect();
        times.sort_unstable();
        assert_eq!(times, (150..250).collect::<Vec<_>>());
    }

    #[test]
    fn keeps_a_key_id_and_cuts_a_long_one() {
        let short = Decision::new(1, Outcome::Replayed, 200, Some("0a1b2c3d4e5f"));
        assert_eq!(short.key_id(), Some("0a1b2c3d4e5f"));
        let long = Decision::new(1, Outcome::Replayed, 200, Some("0123456789abcdefXYZ"));
        assert_eq!(long.key_id(), Some("0123456789abcdef"));
        let none = Decision::new(1, Outcome::Bypassed, 200, None);
        assert_eq!(none.key_id(), None);
    }

    #[test]
    fn a_non_ascii_id_is_cut_before_the_first_non_ascii_byte() {
        let odd = Decision::new(1, Outcome::Replayed, 200, Some("ab\u{e9}cd"));
        assert_eq!(odd.key_id(), Some("ab"));
    }
}
