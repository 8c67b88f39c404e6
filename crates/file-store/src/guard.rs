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

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// How a file store is opened, beyond its path.
#[derive(Debug, Clone, Default)]
pub struct FileStoreOptions {
    boot_id: Option<String>,
    segment_bytes: Option<u64>,
}

/// The size at which the log moves on to a new segment: large enough that a segment's
/// creation (two syncs) is rare, small enough that retiring one is a short read.
pub const SEGMENT_BYTES: u64 = 64 << 20;

impl FileStoreOptions {
    /// Moves the log on to a new segment once one holds `bytes` (default [`SEGMENT_BYTES`]):
    /// smaller segments are retired sooner after their records expire, at one more file each.
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.segment_bytes = Some(bytes);
        self
    }

    pub(super) fn segment_limit(&self) -> u64 {
        self.segment_bytes.unwrap_or(SEGMENT_BYTES)
    }

    /// Takes `boot_id` for the machine's boot instead of reading it from the system: a test
    /// stands for a restart of the machine by giving another.
    pub fn boot_id(mut self, boot_id: impl Into<String>) -> Self {
        self.boot_id = Some(boot_id.into());
        self
    }

    /// The boot this start happens on, if it can be told.
    pub(super) fn current_boot(&self) -> Option<String> {
        self.boot_id.clone().or_else(|| {
            let read = std::fs::read_to_string(BOOT_ID).ok()?;
            Some(read.trim().to_owned()).filter(|id| !id.is_empty())
        })
    }
}

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

    #[test]
    fn a_given_boot_id_stands_for_the_systems() {
        let options = FileStoreOptions::default().boot_id("test-boot");
        assert_eq!(options.current_boot().as_deref(), Some("test-boot"));
    }
}
