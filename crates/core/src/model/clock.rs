//! Wall-clock time as records carry it: whole milliseconds since the Unix epoch.
//!
//! Records outlive the process that wrote them (file store, Redis), so their times are
//! wall-clock, not monotonic: an expiry must mean the same after a restart.

use std::time::{SystemTime, UNIX_EPOCH};

/// `at` in whole milliseconds since the Unix epoch; a time before it counts as zero.
pub fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Now, in whole milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    unix_millis(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_before_the_epoch_are_zero() {
        assert_eq!(unix_millis(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(unix_millis(UNIX_EPOCH + Duration::from_millis(1500)), 1500);
    }
}
