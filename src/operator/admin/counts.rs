//! Counters and gauges counted per thread before they reach the Prometheus recorder's own
//! atomics (see [`batching`](super::batching) for why).
//!
//! Each thread adds to a slot of its own; a render hands the sums over. A gauge set outright
//! drops the changes its slots still hold, as the value set supersedes them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use metrics::{Counter, CounterFn, Gauge, GaugeFn};

use crate::thread_slot::PerThread;

/// One counter: the recorder's, and a count per thread in front of it.
#[derive(Debug)]
pub(super) struct BatchedCounter {
    inner: Counter,
    pending: PerThread<AtomicU64>,
}

impl BatchedCounter {
    /// In front of `inner`, with a slot per thread.
    pub(super) fn new(inner: Counter) -> Self {
        Self {
            inner,
            pending: PerThread::new(),
        }
    }

    /// Hands what every slot holds to the recorder's counter.
    pub(super) fn flush(&self) {
        let total: u64 = self.pending.all().map(|n| n.swap(0, Relaxed)).sum();
        if total > 0 {
            self.inner.increment(total);
        }
    }
}

impl CounterFn for BatchedCounter {
    fn increment(&self, value: u64) {
        self.pending.mine().fetch_add(value, Relaxed);
    }

    fn absolute(&self, value: u64) {
        for pending in self.pending.all() {
            pending.store(0, Relaxed);
        }
        self.inner.absolute(value);
    }
}

/// One gauge: the recorder's, and a change per thread (an `f64`, as bits) in front of it.
#[derive(Debug)]
pub(super) struct BatchedGauge {
    inner: Gauge,
    pending: PerThread<AtomicU64>,
}

impl BatchedGauge {
    /// In front of `inner`, with a slot per thread.
    pub(super) fn new(inner: Gauge) -> Self {
        Self {
            inner,
            pending: PerThread::new(),
        }
    }

    fn add(&self, change: f64) {
        // The slot is this thread's, so the exchange rarely has to be tried again.
        let _ = self.pending.mine().fetch_update(Relaxed, Relaxed, |bits| {
            Some((f64::from_bits(bits) + change).to_bits())
        });
    }

    /// Hands the change every slot holds to the recorder's gauge.
    pub(super) fn flush(&self) {
        let change: f64 = self
            .pending
            .all()
            .map(|bits| f64::from_bits(bits.swap(0, Relaxed)))
            .sum();
        if change != 0.0 {
            self.inner.increment(change);
        }
    }
}

impl GaugeFn for BatchedGauge {
    fn increment(&self, value: f64) {
        self.add(value);
    }

    fn decrement(&self, value: f64) {
        self.add(-value);
    }

    fn set(&self, value: f64) {
        for pending in self.pending.all() {
            pending.store(0, Relaxed);
        }
        self.inner.set(value);
    }
}

#[cfg(test)]
mod tests {
    use metrics::{Key, Recorder};

    use super::super::batching::tests::{metadata, recorder};
    use crate::thread_slot::SLOTS;

    fn value(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|n| n.trim().parse().ok())
    }

    #[test]
    fn counts_from_every_thread_are_rendered_once() {
        let recorder = recorder();
        let requests = recorder.register_counter(&Key::from_name("t_total"), &metadata());
        std::thread::scope(|scope| {
            for _ in 0..2 * SLOTS {
                scope.spawn(|| (0..100).for_each(|_| requests.increment(1)));
            }
        });
        assert_eq!(value(&recorder.render_unflushed(), "t_total"), Some(0.0));
        let total = (2 * SLOTS * 100) as f64;
        assert_eq!(value(&recorder.handle().render(), "t_total"), Some(total));
        requests.increment(2);
        assert_eq!(
            value(&recorder.handle().render(), "t_total"),
            Some(total + 2.0)
        );
        // Counts not yet handed over when the counter is set are in the value it is set to.
        requests.increment(3);
        requests.absolute(5000);
        requests.increment(1);
        assert_eq!(value(&recorder.handle().render(), "t_total"), Some(5001.0));
    }

    #[test]
    fn a_gauge_sums_its_threads_changes_and_a_set_supersedes_them() {
        let recorder = recorder();
        let in_flight = recorder.register_gauge(&Key::from_name("t_in_flight"), &metadata());
        std::thread::scope(|scope| {
            for _ in 0..2 * SLOTS {
                scope.spawn(|| {
                    in_flight.increment(3.0);
                    in_flight.decrement(1.0);
                });
            }
        });
        let text = recorder.handle().render();
        assert_eq!(value(&text, "t_in_flight"), Some((2 * SLOTS * 2) as f64));
        in_flight.increment(5.0);
        in_flight.set(1.5);
        in_flight.decrement(0.5);
        assert_eq!(value(&recorder.handle().render(), "t_in_flight"), Some(1.0));
    }
}
