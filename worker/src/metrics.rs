//! The worker's Prometheus metrics (`sluice worker --metrics-addr`).
//!
//! ```text
//!  service: GetElements producer ──► Counters (elements, bytes, streams open)
//!           CoordinatedGetElement ──┘
//!  scrape ──► WorkerCollector ──► task table: tasks running, cache bytes
//! ```
//!
//! Soft state, like everything in a worker: the counters start from zero with the
//! process. No label names a task, job or trainer (unbounded); values are summed
//! over this worker's tasks.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::state::Worker;

/// Counters of this process, updated by the service.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    elements_streamed: Counter,
    bytes_streamed: Counter,
    streams_opened: Counter,
    streams_open: Gauge,
}

impl Counters {
    /// One message sent to a client: `elements` elements, `bytes` encoded bytes.
    pub(crate) fn streamed(&self, elements: usize, bytes: usize) {
        self.elements_streamed.inc_by(elements as u64);
        self.bytes_streamed.inc_by(bytes as u64);
    }

    /// A GetElements stream opened; it counts as open until the guard drops.
    pub(crate) fn stream_opened(&self) -> OpenStreamGauge {
        self.streams_opened.inc();
        self.streams_open.inc();
        OpenStreamGauge(self.streams_open.clone())
    }
}

pub(crate) struct OpenStreamGauge(Gauge);

impl Drop for OpenStreamGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric of this worker.
pub(crate) fn registry(worker: Arc<Worker>) -> Registry {
    let mut r = sluice_metrics::registry();
    let c = worker.counters.clone();
    r.register(
        "elements_streamed",
        "Elements sent to clients (GetElements streams and coordinated-read rounds)",
        c.elements_streamed,
    );
    r.register(
        "streamed_bytes",
        "Encoded bytes of the element messages sent to clients",
        c.bytes_streamed,
    );
    r.register("streams_opened", "GetElements streams opened", c.streams_opened);
    r.register("streams_open", "GetElements streams open now", c.streams_open);
    r.register_collector(Box::new(WorkerCollector { worker }));
    r
}

/// Reads the task table on each scrape.
struct WorkerCollector {
    worker: Arc<Worker>,
}

impl std::fmt::Debug for WorkerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkerCollector")
    }
}

impl Collector for WorkerCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let (running, _, unreported) = self.worker.activity();
        let cache_bytes: u64 =
            running.iter().filter_map(|t| t.cache.as_ref()).map(|c| c.status().cached_bytes).sum();
        let rows = [
            ("tasks_running", "Tasks this worker runs now", running.len() as u64),
            (
                "tasks_finished_unreported",
                "Finished tasks the dispatcher has not been told of yet",
                unreported as u64,
            ),
            (
                "cross_trainer_cache_bytes",
                "Bytes held in the cross-trainer caches of this worker's tasks",
                cache_bytes,
            ),
        ];
        for (name, help, v) in rows {
            let g = ConstGauge::new(v);
            // Ends with a full stop, as the registry writes registered metrics' help.
            let help = format!("{help}.");
            g.encode(enc.encode_descriptor(name, &help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}
