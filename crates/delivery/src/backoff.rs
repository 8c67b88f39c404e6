//! When a failed delivery is tried again: exponential backoff with full jitter, shared by inbox
//! routes and outbox relays.
//!
//! The ceiling doubles from `initial` with each failed attempt, up to `max`, and the wait is
//! drawn uniformly between zero and the ceiling ("full jitter"), so deliveries that failed
//! together (a receiver that went down) do not all come back together.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The bounds of the backoff: the first ceiling and the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The ceiling after the first failure (`retry_initial`).
    pub initial: Duration,
    /// The largest ceiling (`retry_max`).
    pub max: Duration,
}

impl Backoff {
    /// The ceiling after `failed` failed attempts (the first failure has `failed = 1`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idempotency_delivery::backoff::Backoff;
    ///
    /// let backoff = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(5) };
    /// assert_eq!(backoff.ceiling(3), Duration::from_secs(4));
    /// assert_eq!(backoff.ceiling(4), Duration::from_secs(5));
    /// ```
    pub fn ceiling(&self, failed: u32) -> Duration {
        let doublings = failed.saturating_sub(1).min(63);
        let factor = 1u64 << doublings;
        let ceiling = u32::try_from(factor)
            .ok()
            .and_then(|factor| self.initial.checked_mul(factor))
            .unwrap_or(self.max);
        ceiling.min(self.max)
    }

    /// The wait before the next attempt after `failed` failed attempts, drawn by `sample`.
    pub fn wait(&self, failed: u32, sample: u64) -> Duration {
        full_jitter(self.ceiling(failed), sample)
    }
}

/// A wait drawn from `[0, ceiling]` by `sample`, a uniformly random 64-bit number.
fn full_jitter(ceiling: Duration, sample: u64) -> Duration {
    let fraction = sample as f64 / u64::MAX as f64;
    ceiling.mul_f64(fraction)
}

/// A random 64-bit sample: unpredictable across processes, which is all jitter needs.
pub fn random_sample() -> u64 {
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS once per process and varies per instance; the count
    // and the clock keep two draws of one instant apart.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(600),
        }
    }

    #[test]
    fn the_ceiling_doubles_from_initial_up_to_max() {
        let ceilings: Vec<u64> = (1..=12).map(|n| backoff().ceiling(n).as_secs()).collect();
        assert_eq!(ceilings, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]);
        assert_eq!(backoff().ceiling(0), Duration::from_secs(1));
        assert_eq!(
            backoff().ceiling(u32::MAX),
            Duration::from_secs(600),
            "no overflow"
        );
    }

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let ceiling = Duration::from_secs(8);
        assert_eq!(full_jitter(ceiling, 0), Duration::ZERO);
        assert_eq!(full_jitter(ceiling, u64::MAX), ceiling);
        let half = full_jitter(ceiling, u64::MAX / 2);
        assert!(half.abs_diff(Duration::from_secs(4)) < Duration::from_millis(1));
    }

    #[test]
    fn waits_stay_under_their_ceiling_and_spread_over_it() {
        let waits: Vec<Duration> = (0..200)
            .map(|_| backoff().wait(4, random_sample()))
            .collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_secs(8)));
        let low = waits
            .iter()
            .filter(|w| **w < Duration::from_secs(4))
            .count();
        assert!((40..=160).contains(&low), "{low} of 200 in the lower half");
    }
}
