//! The client's Prometheus metrics: how long the trainer waited for data, and what
//! it was given.
//!
//! ```text
//!  trainer ──next()──► ElementStream ──ReadMetrics──► process-global registry
//!                 asked ─► got: wait_seconds{sluice_job,consumer}     │
//!                 elements_total, bytes_total{sluice_job,consumer}    ▼
//!                                          serve / spawn ──► GET /metrics
//! ```
//!
//! One registry per process, so a trainer with several readers (and the Python
//! package, which wraps this crate) exports one page. The wait is measured in the
//! reader itself, from the first poll of a `next()` (the application asked) to
//! the element it returns: a trainer that waits on data shows a large
//! `sluice_client_wait_seconds_sum` rate; one that computes shows close to zero.
//!
//! Bounded labels: `sluice_job` is the job's name (not `job`, which Prometheus
//! sets to the scrape job's name; anonymous jobs are named `anonymous-<id>` by the
//! dispatcher), admitted through a [`BoundedLabel`] (at most 100 jobs per process,
//! later ones fold into `_other`); `consumer` is the coordinated-read consumer
//! index or "".
//!
//! Soft state of this process: everything counts from its start.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use sluice_dataset::Element;
use sluice_metrics::BoundedLabel;
pub use sluice_metrics::MetricsServer;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReadLabels {
    /// Not `job`: Prometheus sets `job` to the scrape job's name and would rename
    /// ours to `exported_job`.
    sluice_job: String,
    consumer: String,
}

type Histograms = Family<ReadLabels, Histogram, fn() -> Histogram>;

struct Metrics {
    wait: Histograms,
    elements: Family<ReadLabels, Counter>,
    bytes: Family<ReadLabels, Counter>,
    jobs: BoundedLabel,
    registry: Arc<Registry>,
}

fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let wait: Histograms = Family::new_with_constructor(sluice_metrics::latency_histogram);
        let (elements, bytes) = (Family::default(), Family::default());
        let mut r = sluice_metrics::registry();
        r.register(
            "client_wait_seconds",
            "Seconds the application waited for each element, from asking the reader for \
             it (next()) until it got it, by job and consumer",
            wait.clone(),
        );
        r.register(
            "client_elements",
            "Elements the readers delivered to the application, by job and consumer",
            elements.clone(),
        );
        r.register(
            "client_bytes",
            "Payload bytes of the elements delivered to the application, by job and consumer",
            bytes.clone(),
        );
        Metrics { wait, elements, bytes, jobs: BoundedLabel::default(), registry: Arc::new(r) }
    })
}

/// This process's client metrics registry (shared by every reader).
pub fn registry() -> Arc<Registry> {
    global().registry.clone()
}

/// This process's client metrics as OpenMetrics text (what `GET /metrics` answers).
pub fn encode() -> String {
    sluice_metrics::encode(&global().registry)
}

/// Serves this process's client metrics at `http://<addr>/metrics` on the current
/// runtime until the returned server is dropped. Port 0 picks a free port
/// ([`MetricsServer::address`] says which).
pub async fn serve(addr: SocketAddr) -> std::io::Result<MetricsServer> {
    serve_on(tokio::net::TcpListener::bind(addr).await?)
}

/// [`serve`] on a listener the caller bound (e.g. after checking its address).
pub fn serve_on(listener: tokio::net::TcpListener) -> std::io::Result<MetricsServer> {
    sluice_metrics::spawn(listener, registry())
}

/// One reader's handles into the registry, resolved once per read.
pub(crate) struct ReadMetrics {
    wait: Histogram,
    elements: Counter,
    bytes: Counter,
    /// When the application asked for the element it is waiting for, if it is.
    asked: Option<Instant>,
}

impl ReadMetrics {
    pub(crate) fn new(job: &str, consumer: Option<u32>) -> Self {
        let m = global();
        let labels = ReadLabels {
            sluice_job: m.jobs.admit(job).to_string(),
            consumer: consumer.map(|c| c.to_string()).unwrap_or_default(),
        };
        ReadMetrics {
            wait: m.wait.get_or_create_owned(&labels),
            elements: m.elements.get_or_create_owned(&labels),
            bytes: m.bytes.get_or_create_owned(&labels),
            asked: None,
        }
    }

    /// The application polled for an element and none was in hand: the first such
    /// poll starts the wait. (An element already in hand is a wait of zero, observed
    /// without reading the clock: the per-element cost on a fast stream.)
    pub(crate) fn asked(&mut self) {
        self.asked.get_or_insert_with(Instant::now);
    }

    /// The application got `e`: the wait ends.
    pub(crate) fn delivered(&mut self, e: &Element) {
        let waited = self.asked.take().map_or(0.0, |asked| asked.elapsed().as_secs_f64());
        self.wait.observe(waited);
        self.elements.inc();
        self.bytes.inc_by(e.byte_len() as u64);
    }
}
