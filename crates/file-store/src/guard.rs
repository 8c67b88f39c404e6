//! The wait after a machine crash, and the boot id that tells one from a process crash.
//!
//! A reservation is written, not synced, before the upstream is called, so a power loss or a
//! kernel crash can lose it while the call it guarded is still running upstream. A retry after
//! the restart must not reach the upstream while that call may be running: for as long as the
//! lost holder's lease could have lasted, a fresh reservation is refused (`503` with
//! `Retry-After`), while keys with a record are answered as usual (replays, conflicts).
//!
//! A machine crash is a start on another boot (Linux: `/proc/sys/kernel/random/boot_id`) after
//! the store was not closed. A process that was killed on the same boot lost nothing it wrote,
//! so its restart waits for nothing. Where the boot cannot be told, every unclean start is
//! taken for a machine crash.

use std::time::Duration;

/// Since when fresh reservations wait out a lease: the last entry written before a machine
/// crash (unix ms), or 0 for no wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Guard {
    pub(super) from: u64,
}

impl Guard {
    /// How long a fresh reservation under `lease` must still wait at `now`, if at all.
    pub(super) fn wait(self, now: u64, lease: Duration) -> Option<Duration> {
        let lease = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let until = self.from.saturating_add(lease);
        (self.from > 0 && now < until).then(|| Duration::from_millis(until - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_lasts_one_lease_from_the_last_entry() {
        let guard = Guard { from: 10_000 };
        let lease = Duration::from_secs(2);
        assert_eq!(guard.wait(10_500, lease), Some(Duration::from_millis(1500)));
        assert_eq!(guard.wait(12_000, lease), None);
        assert_eq!(Guard::default().wait(1, lease), None);
    }
}
