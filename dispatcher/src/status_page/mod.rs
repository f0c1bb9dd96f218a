//! The dispatcher's status page, served beside `GET /metrics` on the metrics
//! listener (`--metrics-addr`; docs/operations-status.md):
//!
//! ```text
//!  GET / , /status ──► StatusPage::page ──► view::build(replica, soft state) ──► html::page (+ chart::svg)
//!  GET /status.json ─┘                                                       └─► serde_json
//!  history::spawn_sampler (task, every SAMPLE_INTERVAL) ──watch──► the throughput series
//! ```
//!
//! Everything is read from this node, without a Raft round: the replica
//! (`Core::read_local`), Raft's metrics, and soft state (worker heartbeat times
//! on the leader, when peers last answered, the sampled history). A page is
//! cheap, so it cannot be used to load the quorum, and it answers on a node cut
//! off from its peers (which is when an operator opens it).

mod chart;
pub(crate) mod history;
mod html;
mod text;
pub(crate) mod view;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_metrics::{Page, Routes};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::core::Core;
use crate::liveness::Liveness;
use crate::worker_reports::WorkerReports;
use history::History;

/// How often the throughput history is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// Samples held: 15 minutes at [`SAMPLE_INTERVAL`].
pub const HISTORY_SAMPLES: usize = 180;

/// The page's routes; holds the sampler, which stops when this is dropped.
pub(crate) struct StatusPage {
    core: Arc<Core>,
    liveness: Arc<Liveness>,
    reports: Arc<WorkerReports>,
    history: watch::Receiver<Arc<History>>,
    interval: Duration,
    sampler: JoinHandle<()>,
}

impl StatusPage {
    /// Starts sampling `core`'s progress every `interval`.
    pub(crate) fn start(
        core: Arc<Core>,
        liveness: Arc<Liveness>,
        reports: Arc<WorkerReports>,
        interval: Duration,
    ) -> StatusPage {
        let (sampler, history) = history::spawn_sampler(core.clone(), interval, HISTORY_SAMPLES);
        StatusPage { core, liveness, reports, history, interval, sampler }
    }

    /// The page's data, now.
    pub(crate) fn view(&self) -> view::StatusView {
        let heartbeats = self.liveness.heartbeats();
        let errors_ignored = self.reports.errors_ignored();
        let contacts = self.core.contacts().snapshot();
        let raft = self.core.raft().metrics().borrow().clone();
        let history = self.history.borrow().clone();
        let soft = view::Soft {
            heartbeats: &heartbeats,
            errors_ignored: &errors_ignored,
            contacts: &contacts,
            raft: &raft,
            history: &history,
            interval: self.interval,
            now: Instant::now(),
        };
        self.core.read_local(|s| view::build(s, &soft))
    }
}

impl Drop for StatusPage {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

impl Routes for StatusPage {
    fn page(&self, path: &str) -> Option<Page> {
        match path {
            "/" | "/status" => Some(Page::html(html::page(&self.view()))),
            "/status.json" => {
                let json = serde_json::to_string_pretty(&self.view())
                    .unwrap_or_else(|e| format!("{{\"error\": \"encoding the status: {e}\"}}"));
                Some(Page::json(json))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
