//! Requests per second by outcome over the last minute, counted without a lock.
//!
//! Each second has a slot per outcome: one `u64` holding the second it counts (high half) and
//! the count (low half). Recording adds one to the slot when it already counts this second, or
//! starts it at one when it held an older second, in a single compare-and-swap, so no count is
//! lost at the turn of a second and nothing sweeps old slots: a reader skips the ones whose
//! second is not the one it asks about.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use idempotency_core::observe::{Outcome, OUTCOMES};

/// The seconds the page plots.
pub(crate) const SHOWN_SECONDS: usize = 60;

/// More slots than seconds shown, so the second being counted never overwrites one being read.
const SLOTS: usize = 64;

/// Per-second counts by outcome for the last [`SHOWN_SECONDS`] seconds.
#[derive(Debug)]
pub(crate) struct SecondCounts {
    slots: [[AtomicU64; OUTCOMES.len()]; SLOTS],
}

impl Default for SecondCounts {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }
}

fn tag(second: u64) -> u64 {
    // The low 32 bits of the second are enough to tell apart the seconds a ring of 64 holds.
    (second & 0xffff_ffff) << 32
}

fn slot_of(second: u64) -> usize {
    usize::try_from(second % SLOTS as u64).unwrap_or(0)
}

impl SecondCounts {
    /// Counts one request with `outcome` that finished in `second` (since the Unix epoch).
    pub(crate) fn add(&self, second: u64, outcome: Outcome) {
        let slot = &self.slots[slot_of(second)][outcome as usize];
        let tag = tag(second);
        let _ = slot.fetch_update(Relaxed, Relaxed, |held| {
            Some(if held & !0xffff_ffff == tag {
                held + 1
            } else {
                tag | 1
            })
        });
    }

    /// The counts of `outcome` for the [`SHOWN_SECONDS`] whole seconds before `now_second`,
    /// oldest first. The second under way is left out: it would always look like a dip.
    pub(crate) fn series(&self, now_second: u64, outcome: Outcome) -> [u64; SHOWN_SECONDS] {
        let first = now_second.saturating_sub(SHOWN_SECONDS as u64);
        std::array::from_fn(|i| {
            let second = first + i as u64;
            let held = self.slots[slot_of(second)][outcome as usize].load(Relaxed);
            if held & !0xffff_ffff == tag(second) {
                held & 0xffff_ffff
            } else {
                0
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_second_apart_and_forgets_old_ones() {
        let counts = SecondCounts::default();
        let now = 1_700_000_000;
        for _ in 0..3 {
            counts.add(now - 1, Outcome::Forwarded);
        }
        counts.add(now - 60, Outcome::Forwarded);
        counts.add(now - 61, Outcome::Forwarded);
        counts.add(now - 2, Outcome::Replayed);
        counts.add(now, Outcome::Forwarded);
        let forwarded = counts.series(now, Outcome::Forwarded);
        assert_eq!(forwarded[SHOWN_SECONDS - 1], 3, "the last whole second");
        assert_eq!(forwarded[0], 1, "sixty seconds ago is still shown");
        assert_eq!(
            forwarded.iter().sum::<u64>(),
            4,
            "not the second under way nor 61s ago"
        );
        let replayed = counts.series(now, Outcome::Replayed);
        assert_eq!(replayed[SHOWN_SECONDS - 2], 1);
    }

    #[test]
    fn a_slot_reused_a_minute_later_starts_again() {
        let counts = SecondCounts::default();
        let now = 1_700_000_000;
        counts.add(now - SLOTS as u64, Outcome::Conflict);
        counts.add(now, Outcome::Conflict);
        let later = counts.series(now + 1, Outcome::Conflict);
        assert_eq!(
            later[SHOWN_SECONDS - 1],
            1,
            "the old second's count was not carried over"
        );
    }

    #[test]
    fn no_count_is_lost_across_threads() {
        let counts = std::sync::Arc::new(SecondCounts::default());
        let now = 1_700_000_000;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let counts = counts.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        counts.add(now - 1, Outcome::Forwarded);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let series = counts.series(now, Outcome::Forwarded);
        assert_eq!(series[SHOWN_SECONDS - 1], 40_000);
    }
}
