//! The worker's Prometheus metrics (`sluice worker --metrics-addr`).
//!
//! ```text
//!  service: GetElements producer ──► Counters (`counters`: elements, bytes, streams)
//!           CoordinatedGetElement ──┘
//!  scrape ──► WorkerCollector ──► task table (`state`): tasks running, cache bytes,
//!                                   buffer occupancy by job (`buffer::Occupancy`)
//! ```
//!
//! This module reads the task table; the table holds the counters, which therefore
//! live in their own leaf (`counters`), so the two do not depend on each other.
//!
//! Soft state, like everything in a worker: the counters start from zero with the
//! process. No label names a task or trainer (unbounded); the `sluice_job` label of
//! the per-job series is bounded (`counters`: at most 100 jobs per process, then
//! `_other`). The buffer gauges exist only for jobs with a task running here.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::counters::JobLabels;
use crate::state::Worker;

/// Every metric of this worker.
pub(crate) fn registry(worker: Arc<Worker>) -> Registry {
    let mut r = sluice_metrics::registry();
    worker.counters.register(&mut r);
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
        // Buffer occupancy summed per job over the running tasks.
        let mut buffered: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for t in &running {
            let (elements, bytes) = t.buffer.occupancy().get();
            let sum =
                buffered.entry(self.worker.counters.job_labels(&t.job).sluice_job).or_default();
            *sum = (sum.0 + elements, sum.1 + bytes);
        }
        let elements =
            "Elements the job's pipelines on this worker produced that no client took yet.";
        let bytes = "Payload bytes of the elements in worker_buffer_elements.";
        for (name, help, pick) in
            [("worker_buffer_elements", elements, 0), ("worker_buffer_bytes", bytes, 1)]
        {
            let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (job, (n, b)) in &buffered {
                let labels = JobLabels { sluice_job: job.clone() };
                let v = if pick == 0 { *n } else { *b };
                ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
