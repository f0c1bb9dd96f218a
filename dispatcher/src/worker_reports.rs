//! What workers report in their heartbeats beside being alive: the elements their
//! pipelines' `ignore_errors` stages skipped, for `sluice status` and the
//! `sluice_worker_errors_ignored` metric.
//!
//! Soft state of this node, like the heartbeat times: a worker sends a running
//! total since it started in every heartbeat, so a new leader (or a restarted
//! dispatcher) has the figure again at the worker's next heartbeat, and nothing
//! is replicated. A worker that restarts starts again from zero.

use std::collections::HashMap;
use std::sync::Mutex;

/// Per worker address, the last total it reported (only registered workers'
/// heartbeats are read, so the map is as bounded as the registry). A std `Mutex`:
/// each section is one map operation, no `.await`.
#[derive(Default)]
pub(crate) struct WorkerReports {
    errors_ignored: Mutex<HashMap<String, u64>>,
}

impl WorkerReports {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.errors_ignored.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A heartbeat from `address` reported `errors_ignored` skipped elements.
    pub(crate) fn record(&self, address: &str, errors_ignored: u64) {
        self.map().insert(address.to_string(), errors_ignored);
    }

    /// The last total of each worker that reported one.
    pub(crate) fn errors_ignored(&self) -> HashMap<String, u64> {
        self.map().clone()
    }
}
