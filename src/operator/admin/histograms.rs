//! Histogram samples gathered per thread before they reach the Prometheus recorder's list
//! (see [`batching`](super::batching) for why).
//!
//! Each thread appends to a buffer of its own and hands the recorder [`BATCH`] samples at a
//! time, so the list's lines stay with one core for the whole batch.

use std::sync::{Mutex, MutexGuard, PoisonError};

use metrics::{Histogram, HistogramFn};

use crate::thread_slot::PerThread;

/// Samples a thread keeps before handing them over.
const BATCH: usize = 64;

/// One histogram: the recorder's, and a buffer per thread in front of it.
#[derive(Debug)]
pub(super) struct BatchedHistogram {
    inner: Histogram,
    buffers: PerThread<Mutex<Vec<f64>>>,
}

fn lock(buffer: &Mutex<Vec<f64>>) -> MutexGuard<'_, Vec<f64>> {
    buffer.lock().unwrap_or_else(PoisonError::into_inner)
}

impl BatchedHistogram {
    /// In front of `inner`, with a buffer per thread.
    pub(super) fn new(inner: Histogram) -> Self {
        Self {
            inner,
            buffers: PerThread::new(),
        }
    }

    fn hand_over(&self, samples: Vec<f64>) {
        for sample in samples {
            self.inner.record(sample);
        }
    }

    /// Hands what every buffer holds to the recorder's histogram.
    pub(super) fn flush(&self) {
        for buffer in self.buffers.all() {
            self.hand_over(std::mem::take(&mut *lock(buffer)));
        }
    }
}

impl HistogramFn for BatchedHistogram {
    fn record(&self, value: f64) {
        let mut buffer = lock(self.buffers.mine());
        buffer.push(value);
        if buffer.len() >= BATCH {
            let full = std::mem::replace(&mut *buffer, Vec::with_capacity(BATCH));
            drop(buffer);
            self.hand_over(full);
        }
    }
}

#[cfg(test)]
mod tests {
    use metrics::{Key, Recorder};

    use super::super::batching::tests::{metadata, recorder};
    use super::super::batching::BatchingRecorder;
    use super::*;
    use crate::thread_slot::SLOTS;

    fn count(text: &str, name: &str) -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}_count ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    fn histogram(recorder: &BatchingRecorder, name: &'static str) -> Histogram {
        recorder.register_histogram(&Key::from_name(name), &metadata())
    }

    #[test]
    fn a_render_includes_samples_still_in_a_buffer() {
        let recorder = recorder();
        let latency = histogram(&recorder, "t_seconds");
        for _ in 0..3 {
            latency.record(0.01);
        }
        assert_eq!(count(&recorder.handle().render(), "t_seconds"), 3);
        latency.record(0.01);
        assert_eq!(count(&recorder.handle().render(), "t_seconds"), 4);
    }

    #[test]
    fn full_batches_reach_the_recorder_without_a_render() {
        let recorder = recorder();
        let latency = histogram(&recorder, "t_seconds");
        for _ in 0..BATCH + 1 {
            latency.record(0.01);
        }
        assert_eq!(
            count(&recorder.render_unflushed(), "t_seconds"),
            BATCH as u64
        );
    }

    #[test]
    fn samples_from_every_thread_are_counted_once() {
        let recorder = recorder();
        let latency = histogram(&recorder, "t_seconds");
        std::thread::scope(|scope| {
            for _ in 0..2 * SLOTS {
                scope.spawn(|| {
                    for _ in 0..100 {
                        latency.record(0.01);
                    }
                });
            }
        });
        let text = recorder.handle().render();
        assert_eq!(count(&text, "t_seconds"), 2 * SLOTS as u64 * 100);
    }
}
