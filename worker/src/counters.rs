//! The worker's metric counters, updated by the service as it streams.
//!
//! A leaf of its own rather than part of `metrics`: `metrics` reads the task table
//! (`state`) at scrape time, and the table holds these counters, so keeping them
//! apart spares a cycle (`state` → `counters` ← `metrics` → `state`). Registered in
//! the scrape registry by `metrics`.
//!
//! Soft state, like everything in a worker: the counters start from zero with the
//! process.
//!
//! The per-job counters are labelled by the job's name through a
//! [`BoundedLabel`]: at most 100 jobs per worker process, later ones fold into
//! `sluice_job="_other"`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sluice_metrics::BoundedLabel;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct JobLabels {
    /// Not `job`: Prometheus sets `job` to the scrape job's name.
    pub sluice_job: String,
}

/// Counters of this process, updated by the service.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    elements_streamed: Counter,
    bytes_streamed: Counter,
    streams_opened: Counter,
    streams_open: Gauge,
    delivered_elements: Family<JobLabels, Counter>,
    delivered_bytes: Family<JobLabels, Counter>,
    jobs: Arc<BoundedLabel>,
}

/// The counters one stream of a job updates, resolved once when it opens (the
/// job's series are looked up and its label admitted then, not per message).
pub(crate) struct StreamCounters {
    elements: Counter,
    bytes: Counter,
    job_elements: Counter,
    job_bytes: Counter,
}

impl StreamCounters {
    /// One message sent to a client: `elements` elements, `bytes` encoded bytes.
    pub(crate) fn streamed(&self, elements: usize, bytes: usize) {
        self.elements.inc_by(elements as u64);
        self.bytes.inc_by(bytes as u64);
        self.job_elements.inc_by(elements as u64);
        self.job_bytes.inc_by(bytes as u64);
    }
}

impl Counters {
    /// The counters of a stream of `job`.
    pub(crate) fn for_job(&self, job: &str) -> StreamCounters {
        let labels = self.job_labels(job);
        StreamCounters {
            elements: self.elements_streamed.clone(),
            bytes: self.bytes_streamed.clone(),
            job_elements: self.delivered_elements.get_or_create_owned(&labels),
            job_bytes: self.delivered_bytes.get_or_create_owned(&labels),
        }
    }

    /// The labels of `job`'s series (the bounded job label).
    pub(crate) fn job_labels(&self, job: &str) -> JobLabels {
        JobLabels { sluice_job: self.jobs.admit(job).to_string() }
    }

    /// A GetElements stream opened; it counts as open until the guard drops.
    pub(crate) fn stream_opened(&self) -> OpenStreamGauge {
        self.streams_opened.inc();
        self.streams_open.inc();
        OpenStreamGauge(self.streams_open.clone())
    }

    /// Registers every counter (they share their values with `self`).
    pub(crate) fn register(&self, r: &mut Registry) {
        let c = self.clone();
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
        r.register(
            "worker_elements_delivered",
            "Elements sent to clients, by job (its rate is the job's throughput from this \
             worker)",
            c.delivered_elements,
        );
        r.register(
            "worker_bytes_delivered",
            "Encoded bytes of the element messages sent to clients, by job",
            c.delivered_bytes,
        );
        r.register("streams_opened", "GetElements streams opened", c.streams_opened);
        r.register("streams_open", "GetElements streams open now", c.streams_open);
    }
}

pub(crate) struct OpenStreamGauge(Gauge);

impl Drop for OpenStreamGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}
