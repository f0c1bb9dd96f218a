//! The history of a chaos run: what consumers received and which faults were
//! injected when, one JSON object per line (`history.jsonl`). The runner writes
//! it; the checker and the report read only it, so a run can be re-checked later
//! and a failing history kept with its seed.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

/// Milliseconds since the start of the run.
pub type Millis = u64;

/// One line of the history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// First line: what ran.
    Start {
        seed: u64,
        scenario: String,
        /// "dynamic" or "off".
        mode: String,
        /// The dataset is `range(dataset_len)`: element ids are 0..dataset_len.
        dataset_len: u64,
        workers: u32,
        consumers: u32,
        epochs: u32,
        /// "local disk" or "s3".
        work_dir_kind: String,
        /// The consumers read exactly-once and restore from checkpoints
        /// (`trainers.rs`); the checker then demands every element exactly once
        /// among what was consumed and not rolled back (`checker/trainers.rs`).
        #[serde(default)]
        exactly_once: bool,
        /// Exactly-once runs in the deterministic order: consumer `i` of the
        /// `consumers` restores as consumer `i` and must see the order's
        /// sequence `i` (`checker/order.rs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        order: Option<OrderSpec>,
    },
    /// A consumer received an element of an epoch.
    Element { t_ms: Millis, consumer: u32, epoch: u32, value: i64 },
    /// A consumer's read of an epoch ended: `outcome` is "end" (end of sequence)
    /// or the error text.
    EpochEnd { t_ms: Millis, consumer: u32, epoch: u32, outcome: String },
    /// A fault was injected; `id` pairs it with its `FaultEnd`.
    FaultStart { t_ms: Millis, id: u32, fault: Fault },
    /// The fault healed (process restarted, partition lifted, …).
    FaultEnd { t_ms: Millis, id: u32 },
    /// Exactly-once runs: `consumer` took its position `generation` of `epoch`;
    /// it covers the consumer's `Element` lines before this one.
    Checkpoint { t_ms: Millis, consumer: u32, epoch: u32, generation: u64 },
    /// Exactly-once runs: the trainers `ended` were stopped and `started` restored
    /// from the union of the `ended` consumers' positions `generation` (`None`:
    /// from the previous restore point, or the epoch's start, because not every
    /// ended consumer had taken a common position). Elements an ended consumer
    /// received after that position are rolled back: they must come again.
    Restore {
        t_ms: Millis,
        epoch: u32,
        generation: Option<u64>,
        ended: Vec<u32>,
        started: Vec<u32>,
    },
    /// The dispatchers' durable registry (datasets, jobs, cursors) as `sluice
    /// status` reports it, before and after a full-cluster restart.
    Registry { t_ms: Millis, when: String, digest: String },
}

/// What an exactly-once run's deterministic order is a function of
/// (docs/exactly-once.md, "Deterministic order"): with the dataset
/// `range(dataset_len)`, each consumer's sequence follows from these alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderSpec {
    /// `ReadOptions::deterministic`'s seed.
    pub seed: u64,
    /// The dispatchers' `--elements-per-split`: a split's units.
    pub elements_per_split: u64,
}

/// A fault the harness can inject.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL one dispatcher; it is restarted on the same work_dir when healed.
    KillDispatcher { node: u64, was_leader: bool },
    /// SIGKILL two of three at once (quorum lost), restored when healed.
    KillTwoDispatchers { nodes: Vec<u64> },
    /// SIGSTOP, then SIGCONT when healed.
    PauseDispatcher { node: u64 },
    /// SIGKILL a follower, delete its work_dir, restart it empty.
    WipeDispatcher { node: u64 },
    /// SIGKILL follower `down[0]`, later the leader `down[1]` and follower `wiped`; wipe
    /// and restart `wiped` and `down[0]`; restart the leader when healed.
    WipeWithCrash { wiped: u64, down: Vec<u64> },
    /// Stop every dispatcher, then start them all on their work_dirs.
    FullRestart,
    /// SIGKILL a worker; it restarts (same address) when healed.
    KillWorker { worker: u32 },
    /// No traffic between two dispatchers (both directions) until healed.
    Partition { a: u64, b: u64 },
    /// Added latency between two dispatchers.
    Delay { a: u64, b: u64, ms: u64 },
    /// Connections between two dispatchers are cut and refused until healed.
    Drop { a: u64, b: u64 },
    /// Exactly-once runs: every trainer is stopped (as if the training job
    /// crashed) and `consumers` trainers restore from the last checkpoint.
    RestartTrainers { consumers: u32 },
    /// Every request to the S3 server takes `ms` longer.
    S3Slow { ms: u64 },
    /// The S3 server refuses connections until healed.
    S3Down,
}

impl Fault {
    /// Faults that touch only dispatchers (and their storage and network): under
    /// these, DYNAMIC mode must deliver exactly once.
    pub fn is_dispatcher_only(&self) -> bool {
        !matches!(self, Fault::KillWorker { .. } | Fault::RestartTrainers { .. })
    }

    /// A short name for tables ("kill leader", "partition", …).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Fault::KillDispatcher { was_leader: true, .. } => "kill leader",
            Fault::KillDispatcher { .. } => "kill follower",
            Fault::KillTwoDispatchers { .. } => "kill two dispatchers",
            Fault::PauseDispatcher { .. } => "pause dispatcher",
            Fault::WipeDispatcher { .. } => "wipe follower",
            Fault::WipeWithCrash { .. } => "wipe + crash",
            Fault::FullRestart => "full restart",
            Fault::KillWorker { .. } => "kill worker",
            Fault::Partition { .. } => "partition",
            Fault::Delay { .. } => "delay",
            Fault::Drop { .. } => "drop",
            Fault::S3Slow { .. } => "s3 slow",
            Fault::S3Down => "s3 down",
            Fault::RestartTrainers { .. } => "restart trainers",
        }
    }
}

/// Appends events as JSON lines. Not shared between tasks: the runner funnels
/// events to one writer (e.g. through a bounded channel).
pub struct HistoryWriter<W: Write> {
    out: W,
}

impl<W: Write> HistoryWriter<W> {
    pub fn new(out: W) -> Self {
        HistoryWriter { out }
    }

    pub fn write(&mut self, event: &Event) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, event)?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Reads a whole history; an unreadable line is an error naming its number.
pub fn read_history(input: impl BufRead) -> Result<Vec<Event>, String> {
    let mut events = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("history line {}: {e}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let event =
            serde_json::from_str(&line).map_err(|e| format!("history line {}: {e}", i + 1))?;
        events.push(event);
    }
    Ok(events)
}
