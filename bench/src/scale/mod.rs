//! The scale section: one 3-node quorum of `sluice dispatcher` processes (sled, on
//! loopback) against N simulated workers and M simulated consumers in this
//! process, for each size of `--scale-sizes` (N = M = size), over real gRPC and
//! the real protocol: registration, held `WorkerHeartbeat`s, `GetSplit` for the
//! workers' DYNAMIC tasks, `RegisterDataset`/`GetOrCreateJob`/
//! `GetOrCreateIteration` and held `ClientHeartbeat`s for the consumers.
//!
//! # Layout
//! ```text
//!  run ─► per size: fleet::run_size
//!           start 3 nodes ─► N workers register (all at once) ─► phase A: workers
//!           only (CPU, RSS per worker) ─► M consumers join, jobs of `per_job`
//!           (each job: an iteration with a task on every worker) ─► every worker
//!           has its tasks ─► phase B: steady (CPU, RSS per job, latencies) ─► stop
//!  worker: heartbeat loop + GetSplit loop   consumer: join, then the view long poll
//!  ops: latencies per operation, events      snapshots: from the leader's log
//!  types: the config and the figures (a leaf)
//!  report: the table's section
//! ```
//! The simulated workers share [`CHANNELS`] connections (gRPC channels) to the
//! dispatchers, and so do the consumers: a real fleet has one per process, but a
//! few dozen HTTP/2 connections multiplexing a few thousand callers load the
//! dispatcher's handlers the same way and keep this process's sockets bounded.
//! The figures say what the dispatcher costs, not a worker or a reader.

pub mod consumer;
mod fleet;
pub mod ops;
pub mod report;
pub mod snapshots;
mod types;
pub mod worker;

use std::path::{Path, PathBuf};

use crate::measure::Outcome;
pub use fleet::run_size;
pub use types::{ScaleBench, ScaleCase, ScaleConfig, CHANNELS};

/// Runs every size; a size that fails stops the larger ones (reported as not run).
pub async fn run(exe: &Path, cfg: &ScaleConfig, dir: &Path, logs: &Path) -> ScaleBench {
    let mut cases = vec![];
    let mut failed_at = None;
    for &size in &cfg.sizes {
        if let Some(at) = failed_at {
            cases.push(Outcome::Skipped { reason: format!("size {at} failed") });
            continue;
        }
        tracing::info!("--- scale: {size} workers, {size} consumers");
        let work_dir: PathBuf = dir.join(format!("scale-{size}"));
        let r = run_size(exe, cfg, size, &work_dir, logs).await;
        if r.is_err() {
            failed_at = Some(size);
        }
        cases.push(Outcome::from_result(r));
    }
    ScaleBench {
        consumers_per_job: cfg.consumers_per_job,
        split_interval_ms: cfg.split_interval.as_millis() as u64,
        worker_heartbeat_ms: fleet::WORKER_HEARTBEAT.as_millis() as u64,
        client_long_poll_ms: fleet::CONSUMER.long_poll.as_millis() as u64,
        channels: CHANNELS,
        snapshot_every: cfg.snapshot_every,
        steady_secs: cfg.duration.as_secs_f64(),
        cases,
    }
}
