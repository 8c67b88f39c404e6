//! Histogram samples gathered per thread before they reach the Prometheus recorder.
//!
//! The recorder keeps a histogram's samples in one lock-free list that every worker thread
//! appends to, so each sample moves that list's cache lines between cores: under load, three
//! samples per keyed first request (upstream time, reserve, complete) cost about 0.5 µs. Here
//! each thread appends to a buffer of its own and hands the recorder [`BATCH`] samples at a time,
//! so the list's lines stay with one core for the whole batch. `/metrics` hands over what every
//! buffer holds before it renders, so a scrape never misses a sample.
//!
//! This is only the proxy's own recorder: an application that installs its own and embeds the
//! layer gets its recorder's histograms, unbatched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusHandle, PrometheusRecorder};

use crate::thread_slot::slot_of_this_thread;

/// Samples a thread keeps before handing them over.
const BATCH: usize = 64;
/// Buffers per histogram; threads beyond this many share them.
const SLOTS: usize = 8;

/// The Prometheus recorder, with histograms batched per thread.
#[derive(Debug)]
pub(crate) struct BatchingRecorder {
    inner: PrometheusRecorder,
    histograms: Histograms,
}

/// Every batched histogram, by key: one per key, however often it is registered, so that
/// whatever a buffer holds is found and handed over at render time.
#[derive(Debug, Clone, Default)]
struct Histograms(Arc<Mutex<HashMap<Key, Arc<Batched>>>>);

impl Histograms {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Arc<Batched>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn flush(&self) {
        let all: Vec<Arc<Batched>> = self.lock().values().cloned().collect();
        for histogram in all {
            histogram.flush();
        }
    }
}

/// Renders what the recorder holds, after every buffer is handed over.
#[derive(Debug, Clone)]
pub(crate) struct MetricsHandle {
    prometheus: PrometheusHandle,
    histograms: Histograms,
}

impl MetricsHandle {
    /// The Prometheus text of every metric, every sample recorded so far included.
    pub(crate) fn render(&self) -> String {
        self.histograms.flush();
        self.prometheus.render()
    }

    /// Drops what the recorder's own lists no longer need; see `PrometheusHandle::run_upkeep`.
    pub(crate) fn run_upkeep(&self) {
        self.prometheus.run_upkeep();
    }
}

impl BatchingRecorder {
    pub(crate) fn new(inner: PrometheusRecorder) -> Self {
        Self {
            inner,
            histograms: Histograms::default(),
        }
    }

    pub(crate) fn handle(&self) -> MetricsHandle {
        MetricsHandle {
            prometheus: self.inner.handle(),
            histograms: self.histograms.clone(),
        }
    }
}

impl Recorder for BatchingRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.inner.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let batched = self
            .histograms
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Batched::new(self.inner.register_histogram(key, metadata))))
            .clone();
        Histogram::from_arc(batched)
    }
}

/// One histogram: the recorder's, and a buffer per thread in front of it.
#[derive(Debug)]
struct Batched {
    inner: Histogram,
    slots: [Slot; SLOTS],
}

/// A thread's buffer, alone on its cache lines so that two threads never share one.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(Mutex<Vec<f64>>);

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Vec<f64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Batched {
    fn new(inner: Histogram) -> Self {
        Self {
            inner,
            slots: Default::default(),
        }
    }

    fn flush(&self) {
        for slot in &self.slots {
            self.hand_over(std::mem::take(&mut *slot.lock()));
        }
    }

    fn hand_over(&self, samples: Vec<f64>) {
        for sample in samples {
            self.inner.record(sample);
        }
    }
}

impl HistogramFn for Batched {
    fn record(&self, value: f64) {
        let mut buffer = self.slots[slot_of_this_thread(SLOTS)].lock();
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
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;

    fn recorder() -> BatchingRecorder {
        BatchingRecorder::new(PrometheusBuilder::new().build_recorder())
    }

    fn count(text: &str, name: &str) -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}_count ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    fn histogram(recorder: &BatchingRecorder, name: &'static str) -> Histogram {
        let metadata = Metadata::new(module_path!(), metrics::Level::INFO, None);
        recorder.register_histogram(&Key::from_name(name), &metadata)
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
        // The recorder's own handle, which does not flush the buffers.
        let text = recorder.inner.handle().render();
        assert_eq!(count(&text, "t_seconds"), BATCH as u64);
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

    #[test]
    fn a_key_registered_twice_shares_its_buffers() {
        let recorder = recorder();
        histogram(&recorder, "t_seconds").record(0.01);
        histogram(&recorder, "t_seconds").record(0.01);
        assert_eq!(recorder.histograms.lock().len(), 1);
        assert_eq!(count(&recorder.handle().render(), "t_seconds"), 2);
    }
}
