//! The scale section's configuration and figures (a leaf of the section: the
//! runner, the fleet and the report use it).

use std::time::Duration;

use serde::Serialize;

use super::ops::{Event, OpFigures};
use super::snapshots;
use crate::measure::Outcome;

/// Connections (gRPC channels) the simulated workers share; as many for the consumers.
pub const CHANNELS: usize = 32;

/// The scale section's sizes and pacing (`--scale-*` flags).
#[derive(Clone, Debug)]
pub struct ScaleConfig {
    /// N = M of each case, in order.
    pub sizes: Vec<usize>,
    /// The steady window (phase B) of each size; phase A lasts a third of it.
    pub duration: Duration,
    /// Consumers per job (each job has one iteration, with a task on every worker).
    pub consumers_per_job: usize,
    /// Time between two `GetSplit`s of one worker.
    pub split_interval: Duration,
    /// Bound of each setup step (registration, joining, tasks reaching workers).
    pub setup_timeout: Duration,
    /// `--snapshot-every` of the quorum (small enough that a run takes snapshots).
    pub snapshot_every: u64,
}

impl ScaleConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.sizes.is_empty() && self.sizes.iter().all(|s| (1..=20_000).contains(s)),
            "--scale-sizes must list sizes in 1..=20000"
        );
        anyhow::ensure!(self.duration >= Duration::from_secs(1), "--scale-secs must be >= 1");
        anyhow::ensure!(self.consumers_per_job >= 1, "--scale-consumers-per-job must be >= 1");
        anyhow::ensure!(
            self.split_interval >= Duration::from_millis(10),
            "--scale-split-interval-ms must be >= 10"
        );
        anyhow::ensure!(self.snapshot_every >= 1, "snapshot interval must be >= 1");
        Ok(())
    }
}

/// The whole section.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleBench {
    pub consumers_per_job: usize,
    pub split_interval_ms: u64,
    pub worker_heartbeat_ms: u64,
    pub client_long_poll_ms: u64,
    pub channels: usize,
    pub snapshot_every: u64,
    pub steady_secs: f64,
    pub cases: Vec<Outcome<ScaleCase>>,
}

/// One size.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleCase {
    pub workers: usize,
    pub consumers: usize,
    pub jobs: usize,
    /// Tasks = jobs × workers (each iteration has a task on every worker).
    pub tasks: u64,
    /// Registering every worker, all at once.
    pub register_s: f64,
    /// Every consumer joined and every worker got its tasks.
    pub join_s: f64,
    /// Operations during setup (registration, joining) and in the steady window.
    pub setup_ops: Vec<OpFigures>,
    pub steady_ops: Vec<OpFigures>,
    pub steady_events: Vec<(Event, u64)>,
    /// CPU of each node over phase A (workers only) and phase B (steady), in
    /// CPU-ms per second; the leader first.
    pub cpu_a_ms_per_s: Vec<f64>,
    pub cpu_b_ms_per_s: Vec<f64>,
    /// This process (the simulated fleet) over phase B, CPU-ms per second: it
    /// shares the machine's cores with the quorum.
    pub simulator_ms_per_s: f64,
    /// Leader CPU-ms per second per worker (phase A), and per consumer (phase B
    /// minus phase A, over M: a consumer's heartbeats and its job's share of grants).
    pub leader_ms_per_worker_s: f64,
    pub leader_ms_per_consumer_s: f64,
    /// Leader VmRSS: idle, after registration, after joining (bytes).
    pub rss: [u64; 3],
    pub rss_per_worker: f64,
    /// Per job (its iteration and its N tasks), and per task.
    pub rss_per_job: f64,
    pub rss_per_task: f64,
    pub snapshots: Vec<snapshots::Snapshot>,
    /// Workers the leader had declared lost at the end (GetStatus).
    pub workers_lost: usize,
    /// The Raft term when the steady window began and at the end: a change is
    /// an election (the leader missed its heartbeats to the followers).
    pub term: [u64; 2],
    /// The node leading when the steady window began and at its end (1..=3).
    pub leader: [u64; 2],
    /// The leader's last log index at the end: the entries of the whole run.
    pub log_entries: u64,
    /// What broke, plainly (empty: nothing).
    pub broke: Vec<String>,
}
