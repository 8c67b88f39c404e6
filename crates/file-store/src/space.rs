//! What each segment of the log still holds, and which one to retire next.
//!
//! Segments are retired oldest first and only oldest first (`retire.rs`): what is still current
//! in the oldest one is written again at the head of the log, then the file is deleted. Nothing
//! older than it is left, so nothing it drops (a delete, a record overwritten or expired) can
//! bring back an older version of a key: every key's last change before the head stays the last.
//!
//! The oldest is retired once little of it is current, or once little of the whole log is: a
//! segment that is mostly current (a burst of long-lived records, the reservations a crash left
//! held) would otherwise keep every segment behind it, however dead, until its own records
//! expire, and the log would grow by everything written in the meantime. Moving its current
//! records on costs about a third of the dead changes the pass frees, or less.
//!
//! The choice is made from counts kept as the writer goes: each segment's changes, its current
//! deliveries, and its current records by the second they expire, and their sums over the whole
//! log. The counts only decide when;
//! which change is still current is decided again, exactly, by the writer when the segment is
//! retired. After a restart a completed record's replacement is not subtracted (its expiry is
//! not in memory), so a segment's records are over-counted, which only retires it later.

use std::collections::BTreeMap;

use super::journal::Loc;

/// The oldest segment is retired once at most a quarter of its changes, or of the whole log's,
/// are current: a record is written again about once on its way to expiring, and the log holds
/// at most about four times what is current.
const RETIRE_LIVE_SHARE: u64 = 4;

#[derive(Debug, Default)]
struct Usage {
    changes: u64,
    deliveries: u64,
    /// Current records by the second by which they have expired.
    records: BTreeMap<u64, u64>,
    /// The sum of `records`, so that the whole log's share is known without a pass over it.
    held: u64,
}

impl Usage {
    fn current(&self, now: u64) -> u64 {
        let live: u64 = self.records.range(live_from(now)..).map(|(_, n)| n).sum();
        live + self.deliveries
    }

    fn add_records(&mut self, second: u64, n: u64) {
        *self.records.entry(second).or_default() += n;
        self.held += n;
    }

    /// Takes up to `n` records expiring by `second` off; how many there were.
    fn remove_records(&mut self, second: u64, n: u64) -> u64 {
        let Some(count) = self.records.get_mut(&second) else {
            return 0;
        };
        let removed = n.min(*count);
        *count -= removed;
        self.held -= removed;
        if *count == 0 {
            self.records.remove(&second);
        }
        removed
    }

    /// Whether at most a quarter is current at `now`; counts of expired records are dropped.
    fn mostly_dead(&mut self, now: u64) -> bool {
        while let Some(expired) = self.records.first_entry() {
            if *expired.key() >= live_from(now) {
                break;
            }
            self.held -= expired.remove();
        }
        (self.held + self.deliveries) * RETIRE_LIVE_SHARE <= self.changes
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

/// Every segment's counts, by segment number, and the whole log's.
#[derive(Debug, Default)]
pub(super) struct Space {
    segments: BTreeMap<u32, Usage>,
    log: Usage,
}

impl Space {
    fn usage(&mut self, segment: u32) -> &mut Usage {
        self.segments.entry(segment).or_default()
    }

    /// A segment exists, though it may hold nothing yet.
    pub(super) fn add_segment(&mut self, segment: u32) {
        self.usage(segment);
    }

    /// `segment` is gone: its counts leave the whole log's.
    pub(super) fn forget(&mut self, segment: u32) {
        let Some(usage) = self.segments.remove(&segment) else {
            return;
        };
        self.log.changes -= usage.changes;
        self.log.deliveries -= usage.deliveries;
        for (second, n) in usage.records {
            self.log.remove_records(second, n);
        }
    }

    /// One more change written to `segment`.
    pub(super) fn changed(&mut self, segment: u32) {
        self.usage(segment).changes += 1;
        self.log.changes += 1;
    }

    /// The record at `loc`, expiring at `expiry`, is current.
    pub(super) fn record_current(&mut self, loc: Loc, expiry: u64) {
        self.usage(loc.segment()).add_records(second(expiry), 1);
        self.log.add_records(second(expiry), 1);
    }

    /// The record at `loc` is no longer current (overwritten or deleted) before `expiry`.
    pub(super) fn record_replaced(&mut self, loc: Loc, expiry: u64) {
        let Some(usage) = self.segments.get_mut(&loc.segment()) else {
            return;
        };
        let removed = usage.remove_records(second(expiry), 1);
        self.log.remove_records(second(expiry), removed);
    }

    pub(super) fn delivery_current(&mut self, loc: Loc) {
        self.usage(loc.segment()).deliveries += 1;
        self.log.deliveries += 1;
    }

    pub(super) fn delivery_replaced(&mut self, loc: Loc) {
        if let Some(usage) = self.segments.get_mut(&loc.segment()) {
            if usage.deliveries > 0 {
                usage.deliveries -= 1;
                self.log.deliveries -= 1;
            }
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
        // Both, so that both drop what has expired by the same time.
        let log_mostly_dead = self.log.mostly_dead(now);
        let mostly_dead = usage.mostly_dead(now);
        (mostly_dead || log_mostly_dead).then_some(oldest)
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
    fn a_mostly_current_oldest_segment_goes_once_the_whole_log_is_mostly_dead() {
        let mut space = Space::default();
        for n in 0..4 {
            space.changed(1);
            space.record_current(Loc::new(1, n), 3_600_000);
        }
        for n in 0..12 {
            space.changed(2);
            space.record_current(Loc::new(2, n), 10_000);
        }
        space.add_segment(3);
        assert_eq!(space.retirable(3, 5_000), None, "everything current");
        assert_eq!(
            space.retirable(3, 10_000),
            Some(1),
            "all of it, a quarter of the log"
        );
        space.forget(1);
        assert_eq!(space.retirable(3, 10_000), Some(2), "none of it");
        space.forget(2);
        assert_eq!(space.retirable(3, 10_000), None, "never the head");
        assert_eq!(
            (space.log.changes, space.log.held),
            (0, 0),
            "nothing left counted"
        );
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
