//! The process-wide Prometheus recorder behind `/metrics`, its metrics batched per thread
//! (`batching.rs`).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use super::batching::{BatchingRecorder, MetricsHandle};

/// The process-wide Prometheus recorder, installed on first use.
pub(crate) fn metrics_handle() -> MetricsHandle {
    static HANDLE: OnceLock<MetricsHandle> = OnceLock::new();
    HANDLE.get_or_init(install_recorder).clone()
}

fn install_recorder() -> MetricsHandle {
    const BUCKETS: &[f64] = &[
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ];
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
        .expect("bucket list is not empty");
    let recorder = BatchingRecorder::new(builder.build_recorder());
    let handle = recorder.handle();
    // Another recorder may already be installed by an embedding application; then we only render.
    let _ = metrics::set_global_recorder(recorder);
    let upkeep = handle.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(5));
        upkeep.run_upkeep();
    });
    handle
}
