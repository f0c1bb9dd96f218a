//! Caps on what callers can make one dispatcher hold: datasets, jobs,
//! iterations, consumers (clients), unfinished tasks per worker, and the
//! consumers of a coordinated read.
//!
//! The caps are configuration (`DispatcherConfig::limits`, `sluice dispatcher
//! --max-*`), and the handler stamps them into each command that creates
//! something (as it stamps `static_workers`), so `apply` enforces them from the
//! command alone: every replica, and a replay, refuses the same commands even if
//! the nodes' flags differ or changed across a restart. A refusal is
//! `StateError::ResourceExhausted` naming the count, the cap and its flag, with
//! the state unchanged.
//!
//! What frees room: a released or timed-out consumer frees its client; finished
//! and collected iterations (with their tasks and clients), and a job whose
//! last iteration went, are forgotten after `finished_job_ttl`
//! (`apply/forget.rs`). Datasets are never forgotten (a reader may come back for
//! an id at any time), so `--max-datasets` counts every registration.

use serde::{Deserialize, Serialize};

use crate::error::StateError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Registered datasets (`--max-datasets`).
    pub max_datasets: u64,
    /// Jobs held, anonymous or named (`--max-jobs`).
    pub max_jobs: u64,
    /// Iterations held, live or finished and not yet forgotten (`--max-iterations`).
    pub max_iterations: u64,
    /// Consumers reading (client ids held) (`--max-clients`).
    pub max_clients: u64,
    /// Unfinished tasks one worker runs (`--max-tasks-per-worker`): each is a
    /// pipeline with its buffers on that worker.
    pub max_tasks_per_worker: u64,
    /// `num_consumers` of a coordinated read (`--max-num-consumers`).
    pub max_num_consumers: u32,
}

impl Default for Limits {
    /// Far above what one training cluster uses, far below what would exhaust
    /// a dispatcher's memory or make its snapshots unwieldy.
    fn default() -> Self {
        Limits {
            max_datasets: 10_000,
            max_jobs: 10_000,
            max_iterations: 10_000,
            max_clients: 10_000,
            max_tasks_per_worker: 1_000,
            max_num_consumers: 1_024,
        }
    }
}

impl Limits {
    /// Refuses when `held` has reached `cap`.
    pub(crate) fn check(held: usize, cap: u64, what: &str, flag: &str) -> Result<(), StateError> {
        if (held as u64) < cap {
            return Ok(());
        }
        Err(StateError::ResourceExhausted(format!(
            "this dispatcher holds {held} {what}, its cap ({flag} {cap}); wait for finished \
             work to be collected (--finished-job-ttl-secs), release what is unused, or raise \
             {flag} on every dispatcher"
        )))
    }

    /// Every cap must allow something.
    pub fn validate(&self) -> Result<(), String> {
        let caps = [
            ("--max-datasets", self.max_datasets),
            ("--max-jobs", self.max_jobs),
            ("--max-iterations", self.max_iterations),
            ("--max-clients", self.max_clients),
            ("--max-tasks-per-worker", self.max_tasks_per_worker),
            ("--max-num-consumers", u64::from(self.max_num_consumers)),
        ];
        match caps.iter().find(|(_, v)| *v == 0) {
            Some((flag, _)) => Err(format!("{flag} must be at least 1")),
            None => Ok(()),
        }
    }
}
