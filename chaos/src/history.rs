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
        /// A lifecycle run (`lifecycle/`): many jobs (`JobStart` … `JobEnd`) instead
        /// of epochs of one; the checker is `checker/lifecycle.rs`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        lifecycle: bool,
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
    /// Lifecycle runs: a job was started; what it reads and how.
    JobStart { t_ms: Millis, job: u32, spec: JobSpec },
    /// Lifecycle runs: one reader of a job stopped. `outcome`: "end" (end of
    /// sequence), "checkpointed" (an exactly-once reader stopped after taking a
    /// position; the next `incarnation` of its slot restores from it), or the
    /// error text. `values`: the multiset it kept (a checkpointed reader: what it
    /// took before its position), as sorted runs; `rolled_back`: elements it took
    /// after its position (they must come again); `lost_workers`: the workers its
    /// loss report named (a read that accepted loss, or failed with DataLost).
    JobEnd {
        t_ms: Millis,
        job: u32,
        reader: u32,
        incarnation: u32,
        outcome: String,
        values: Vec<ValueRun>,
        #[serde(default)]
        rolled_back: u64,
        #[serde(default)]
        lost_workers: Vec<String>,
    },
    /// Lifecycle runs: a worker process started at `worker` (an address) and
    /// registered.
    WorkerUp { t_ms: Millis, worker: String },
}

impl Event {
    /// When it happened (ms since the run started); `None` for `Start`.
    pub fn t_ms(&self) -> Option<Millis> {
        match self {
            Event::Element { t_ms, .. }
            | Event::EpochEnd { t_ms, .. }
            | Event::FaultStart { t_ms, .. }
            | Event::FaultEnd { t_ms, .. }
            | Event::Registry { t_ms, .. }
            | Event::Checkpoint { t_ms, .. }
            | Event::Restore { t_ms, .. }
            | Event::JobStart { t_ms, .. }
            | Event::JobEnd { t_ms, .. }
            | Event::WorkerUp { t_ms, .. } => Some(*t_ms),
            Event::Start { .. } => None,
        }
    }
}

/// A lifecycle `JobEnd` outcome: an exactly-once reader stopped after taking a
/// position; the next incarnation of its reader restores from it.
pub const CHECKPOINTED: &str = "checkpointed";

/// `count` copies of each value in `from..=to`: a multiset as sorted runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRun {
    pub from: i64,
    pub to: i64,
    pub count: u32,
}

/// Encodes a multiset as its sorted runs (consecutive values with one count).
pub fn value_runs(values: &mut [i64]) -> Vec<ValueRun> {
    values.sort_unstable();
    let mut runs: Vec<ValueRun> = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let v = values[i];
        let count = values[i..].iter().take_while(|x| **x == v).count();
        i += count;
        let count = count as u32;
        match runs.last_mut() {
            Some(r) if r.to + 1 == v && r.count == count => r.to = v,
            _ => runs.push(ValueRun { from: v, to: v, count }),
        }
    }
    runs
}

/// What a lifecycle job reads and how (`lifecycle/plan.rs` draws them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// A named job (shared by its readers), or anonymous (`None`, one reader).
    pub name: Option<String>,
    /// "dynamic" or "off".
    pub mode: String,
    pub exactly_once: bool,
    pub pipeline: Pipeline,
    /// Readers sharing the job (anonymous: 1).
    pub readers: u32,
    /// At-most-once reads: a loss ends the read normally with a loss report
    /// instead of `DataLost`.
    pub accept_loss: bool,
    /// Exactly-once: the reader takes a position after this many elements, reads
    /// on a little, stops, and a new reader restores from the position.
    pub checkpoint_after: Option<u64>,
}

/// A lifecycle job's pipeline; each element's int64 values are what it yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Pipeline {
    /// `range(n)`: 0..n.
    Range { n: u64 },
    /// `range(n).map(add(add))`: add..add + n. (A map that keeps values
    /// consecutive, so a `JobEnd`'s runs stay few.)
    Add { n: u64, add: i64 },
    /// `range(n).batch(size)`: 0..n in batches, flattened.
    Batch { n: u64, size: u64 },
}

impl Pipeline {
    /// The values one whole copy yields, ascending.
    pub fn expected(&self) -> Vec<i64> {
        match *self {
            Pipeline::Range { n } | Pipeline::Batch { n, .. } => (0..n as i64).collect(),
            Pipeline::Add { n, add } => (add..add + n as i64).collect(),
        }
    }
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
    /// Lifecycle runs: SIGKILL the worker at `worker` (an address); healed when a
    /// replacement on a new address registered. It never comes back.
    WorkerKilled { worker: String },
    /// Lifecycle runs: SIGTERM the worker at `worker` (it drains, guarantee P1)
    /// and start a replacement on a new address; healed when both happened.
    WorkerDrained { worker: String },
    /// Lifecycle runs: restart the dispatchers one by one, each waited for until
    /// the cluster is whole again.
    RollingRestart,
}

impl Fault {
    /// Faults that touch only dispatchers (and their storage and network): under
    /// these, DYNAMIC mode must deliver exactly once.
    pub fn is_dispatcher_only(&self) -> bool {
        !matches!(
            self,
            Fault::KillWorker { .. }
                | Fault::RestartTrainers { .. }
                | Fault::WorkerKilled { .. }
                | Fault::WorkerDrained { .. }
        )
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
            Fault::WorkerKilled { .. } => "kill worker (replaced)",
            Fault::WorkerDrained { .. } => "drain worker",
            Fault::RollingRestart => "rolling restart",
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
