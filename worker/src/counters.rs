//! The worker's metric counters, updated by the service as it streams.
//!
//! A leaf of its own rather than part of `metrics`: `metrics` reads the task table
//! (`state`) at scrape time, and the table holds these counters, so keeping them
//! apart spares a cycle (`state` → `counters` ← `metrics` → `state`). Registered in
//! the scrape registry by `metrics`.
//!
//! Soft state, like everything in a worker: the counters start from zero with the
//! process.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
