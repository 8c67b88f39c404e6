//! What each segment of the log still holds, and which one to retire next.
//!
//! Segments are retired oldest first and only oldest first (`retire.rs`): what is still current
//! in the oldest one is written again at the head of the log, then the file is deleted. Nothing
//! older than it is left, so nothing it drops (a delete, a record overwritten or expired) can
//! bring back an older version of a key: every key's last change before the head stays the last.
//!
//! The choice is made from counts kept as the writer goes: each segment's changes, its current
//! deliveries, and its current records by the second they expire. The counts only decide when;
//! which change is still current is decided again, exactly, by the writer when the segment is
//! retired. After a restart a completed record's replacement is not subtracted (its expiry is
//! not in memory), so a segment's records are over-counted, which only retires it later.

use std::collections::BTreeMap;

use super::journal::Loc;

/// A segment is retired once at most a quarter of its changes are current: each record is
/// written again at most once on its way to expiring, and a store's log holds at most about
/// four times what is current in its oldest segment.
const RETIRE_LIVE_SHARE: u64 = 4;

#[derive(Debug, Default)]
struct Usage {
    changes: u64,
    deliveries: u64,
    /// Current records by the second by which they have expired.
    records: BTreeMap<u64, u64>,
}

impl Usage {
    fn current(&self, now: u64) -> u64 {
        let live: u64 = self.records.range(live_from(now)..).map(|(_, n)| n).sum();
        live + self.deliveries
    }
}

/// The second by which a record expiring at `expiry` (unix ms) has expired.
fn second(expiry: u64) -> u64 {
    expiry.div_ceil(1000)
}

/// The first such second of a record that may still be live at `now`.
fn live_from(now: u64) -> u64 {
    now / 1000 + 1
}

/// Every segment's counts, by segment number.
#[derive(Debug, Default)]
pub(super) struct Space {
    segments: BTreeMap<u32, Usage>,
}

impl Space {
    fn usage(&mut self, segment: u32) -> &mut Usage {
        self.segments.entry(segment).or_default()
    }

    /// A segment exists, though it may hold nothing yet.
    pub(super) fn add_segment(&mut self, segment: u32) {
        self.usage(segment);
    }

    pub(super) fn forget(&mut self, segment: u32) {
        self.segments.remove(&segment);
    }

    /// One more change written to `segment`.
    pub(super) fn changed(&mut self, segment: u32) {
        self.usage(segment).changes += 1;
    }

    /// The record at `loc`, expiring at `expiry`, is current.
    pub(super) fn record_current(&mut self, loc: Loc, expiry: u64) {
        *self
            .usage(loc.segment())
            .records
            .entry(second(expiry))
            .or_default() += 1;
    }

    /// The record at `loc` is no longer current (overwritten or deleted) before `expiry`.
    pub(super) fn record_replaced(&mut self, loc: Loc, expiry: u64) {
        let Some(usage) = self.segments.get_mut(&loc.segment()) else {
            return;
        };
        if let Some(count) = usage.records.get_mut(&second(expiry)) {
            *count -= 1;
            if *count == 0 {
                usage.records.remove(&second(expiry));
            }
        }
    }

    pub(super) fn delivery_current(&mut self, loc: Loc) {
        self.usage(loc.segment()).deliveries += 1;
    }

    pub(super) fn delivery_replaced(&mut self, loc: Loc) {
        if let Some(usage) = self.segments.get_mut(&loc.segment()) {
            usage.deliveries = usage.deliveries.saturating_sub(1);
        }
    }

    /// Whether `segment` holds changes and none of them is current any more.
    pub(super) fn spent(&self, segment: u32, now: u64) -> bool {
        let usage = self.segments.get(&segment);
        usage.is_some_and(|usage| usage.changes > 0 && usage.current(now) == 0)
    }

    /// The oldest segment, if it is not `head` and is worth retiring at `now`. Counts of
    /// records that have expired are dropped on the way.
    pub(super) fn retirable(&mut self, head: u32, now: u64) -> Option<u32> {
        let (&oldest, usage) = self.segments.iter_mut().next()?;
        if oldest == head {
            return None;
        }
        while let Some(expired) = usage.records.first_entry() {
            if *expired.key() >= live_from(now) {
                break;
            }
            expired.remove();
        }
        (usage.current(now) * RETIRE_LIVE_SHARE <= usage.changes).then_some(oldest)
    }

    /// How many segments there are.
    #[cfg(test)]
    fn segments(&self) -> usize {
        self.segments.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_segment_is_retired_once_little_of_it_is_current() {
        let mut space = Space::default();
        for n in 0..8 {
            space.changed(1);
            space.record_current(Loc::new(1, n), 10_000 + n * 1000);
        }
        space.add_segment(2);
        assert_eq!(space.retirable(2, 5_000), None, "all eight current");
        for n in 0..5 {
            space.record_replaced(Loc::new(1, n), 10_000 + n * 1000);
        }
        assert_eq!(space.retirable(2, 5_000), None, "three of eight current");
        space.record_replaced(Loc::new(1, 5), 15_000);
        assert_eq!(space.retirable(2, 5_000), Some(1), "two of eight");
        assert_eq!(space.retirable(1, 5_000), None, "never the head");
    }

    #[test]
    fn expired_records_and_settled_deliveries_are_not_current() {
        let mut space = Space::default();
        space.changed(1);
        space.record_current(Loc::new(1, 0), 10_000);
        space.changed(1);
        space.delivery_current(Loc::new(1, 1));
        assert!(!space.spent(1, 10_500));
        space.delivery_replaced(Loc::new(1, 1));
        assert!(!space.spent(1, 9_999));
        assert!(space.spent(1, 10_000));
        space.add_segment(2);
        assert_eq!(space.retirable(2, 10_000), Some(1));
        space.forget(1);
        assert_eq!(space.segments(), 1);
    }
}
