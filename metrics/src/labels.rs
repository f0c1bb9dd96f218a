//! Bounded label values and the shared latency buckets.
//!
//! A label named after something users create (a job) would let a long-lived
//! process grow one series per value forever, and a Prometheus server with it.
//! [`BoundedLabel`] admits the first [`MAX_LABEL_VALUES`] distinct values a process
//! sees and folds every later one into [`OTHER`], so a process exports at most
//! that many series per metric and label. The cap is per process and soft state:
//! a restart starts a new set.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Distinct values one [`BoundedLabel`] admits before folding into [`OTHER`].
pub const MAX_LABEL_VALUES: usize = 100;

/// The value every value beyond the cap becomes.
pub const OTHER: &str = "_other";

/// Latency buckets in seconds (100 µs to 30 s, about ×2.5 apart), shared by the
/// client's wait, the Raft commit and the journal flush histograms so that their
/// quantiles are equally fine-grained and comparable on one dashboard.
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// A classic histogram over [`LATENCY_BUCKETS`].
pub fn latency_histogram() -> prometheus_client::metrics::histogram::Histogram {
    prometheus_client::metrics::histogram::Histogram::new(LATENCY_BUCKETS)
}

/// The values one label may take in this process: at most `max` distinct ones.
#[derive(Debug)]
pub struct BoundedLabel {
    max: usize,
    // A std Mutex: held for one set lookup, never across an await.
    seen: Mutex<HashSet<Arc<str>>>,
}

impl Default for BoundedLabel {
    fn default() -> Self {
        BoundedLabel::new(MAX_LABEL_VALUES)
    }
}

impl BoundedLabel {
    pub fn new(max: usize) -> Self {
        BoundedLabel { max, seen: Mutex::new(HashSet::new()) }
    }

    /// `value` if it was seen before or there is room for it, else [`OTHER`].
    pub fn admit(&self, value: &str) -> Arc<str> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = seen.get(value) {
            return v.clone();
        }
        if seen.len() >= self.max {
            return Arc::from(OTHER);
        }
        let v: Arc<str> = Arc::from(value);
        seen.insert(v.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_beyond_the_cap_fold_into_other_and_admitted_ones_stay() {
        let l = BoundedLabel::new(2);
        assert_eq!(&*l.admit("a"), "a");
        assert_eq!(&*l.admit("b"), "b");
        assert_eq!(&*l.admit("c"), OTHER);
        assert_eq!(&*l.admit("a"), "a", "an admitted value keeps its series");
    }
}
