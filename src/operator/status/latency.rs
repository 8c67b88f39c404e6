//! Recent store latency: the last store operations' durations, for the page's p50 and p99.
//!
//! A fixed ring of samples written without a lock: each sample is one `u64` holding the second
//! it was taken (high half) and the duration in microseconds (low half), so a reader can keep
//! only the last minute's and never sees half of one sample and half of another.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// How many samples each route keeps: enough for a steady p99, small enough to sort per read.
const SAMPLES: usize = 512;

/// How far back the page looks.
pub(crate) const LATENCY_WINDOW: Duration = Duration::from_secs(60);

/// The last [`SAMPLES`] store operation durations.
#[derive(Debug)]
pub(crate) struct LatencySamples {
    samples: [AtomicU64; SAMPLES],
    next: AtomicUsize,
}

impl Default for LatencySamples {
    fn default() -> Self {
        Self {
            samples: std::array::from_fn(|_| AtomicU64::new(0)),
            next: AtomicUsize::new(0),
        }
    }
}

impl LatencySamples {
    /// Keeps one operation's duration, taken in `second` (since the Unix epoch).
    pub(crate) fn record(&self, second: u64, took: Duration) {
        let micros = u64::try_from(took.as_micros())
            .unwrap_or(u64::MAX)
            .min(0xffff_ffff);
        // Zero marks an empty slot, so a sample from second zero is never kept: no loss.
        let sample = ((second & 0xffff_ffff) << 32) | micros;
        let at = self.next.fetch_add(1, Relaxed) % SAMPLES;
        self.samples[at].store(sample, Relaxed);
    }

    /// The durations taken within [`LATENCY_WINDOW`] before `now_second`, in microseconds.
    pub(crate) fn recent_micros(&self, now_second: u64, out: &mut Vec<u32>) {
        let oldest = now_second.saturating_sub(LATENCY_WINDOW.as_secs()) & 0xffff_ffff;
        let now = now_second & 0xffff_ffff;
        for sample in &self.samples {
            let sample = sample.load(Relaxed);
            let second = sample >> 32;
            if sample != 0 && second >= oldest && second <= now {
                out.push(u32::try_from(sample & 0xffff_ffff).unwrap_or(u32::MAX));
            }
        }
    }
}

/// The `q` quantile (0 to 1) of `sorted` by the nearest-rank method, if there are any.
pub(crate) fn quantile(sorted: &[u32], q: f64) -> Option<u32> {
    let last = sorted.len().checked_sub(1)?;
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).saturating_sub(1);
    Some(sorted[rank.min(last)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_last_minute() {
        let samples = LatencySamples::default();
        let now = 1_700_000_000;
        samples.record(now - 120, Duration::from_millis(900));
        samples.record(now - 30, Duration::from_micros(250));
        samples.record(now, Duration::from_micros(750));
        let mut recent = Vec::new();
        samples.recent_micros(now, &mut recent);
        recent.sort_unstable();
        assert_eq!(recent, vec![250, 750]);
    }

    #[test]
    fn keeps_a_bounded_number() {
        let samples = LatencySamples::default();
        for i in 0..(SAMPLES as u64 * 3) {
            samples.record(1_000, Duration::from_micros(i));
        }
        let mut recent = Vec::new();
        samples.recent_micros(1_000, &mut recent);
        assert_eq!(recent.len(), SAMPLES);
        assert_eq!(
            recent.iter().min(),
            Some(&(SAMPLES as u32 * 2)),
            "the oldest were overwritten"
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&sorted, 0.5), Some(50));
        assert_eq!(quantile(&sorted, 0.99), Some(99));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
