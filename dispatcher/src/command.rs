//! Commands: the only way the dispatcher's state changes, and what the log carries.
//!
//! Each command is one whole operation (e.g. "create the iteration, its tasks and a
//! client"), so a crash never leaves half of one applied. Everything a command
//! needs from outside (configuration values, validated definitions) is stamped into
//! it by the RPC handler before it is proposed; `apply` only reads the command and
//! the state.

use std::cell::Cell;
use std::thread::LocalKey;

use serde::{Deserialize, Serialize};
use sluice_dataset::DatasetDef;
use sluice_positions::{RecordSet, Run, UnitRecords};

use crate::error::StateError;
use crate::limits::Limits;
use crate::order::{Order, Place};
use crate::quotas::Charge;
use crate::state::{
    ClientId, DatasetId, IterationId, JobId, Mode, SplitAnswer, TargetWorkers, TaskId,
};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// `def` was validated (structure and function names) by the handler.
    RegisterDataset {
        dataset_id: Option<DatasetId>,
        #[serde(with = "crate::def_serde")]
        def: DatasetDef,
        /// The dispatcher's caps (`limits.rs`), stamped by the handler.
        limits: Limits,
    },
    /// `job_name: None` creates an anonymous job. `static_workers` is the
    /// dispatcher's configured `worker_addresses`, stamped by the handler; a new
    /// job in a static mode keeps it as its shard list.
    GetOrCreateJob {
        dataset_id: DatasetId,
        mode: Mode,
        job_name: Option<String>,
        target_workers: TargetWorkers,
        static_workers: Vec<String>,
        /// tf.data's cross-trainer cache: part of the job's identity; needs a job
        /// name and a pipeline not known to be finite.
        cross_trainer_cache: bool,
        /// Coordinated reads: the job reads in rounds of this many consumers
        /// (refused over a pipeline known to end; see `apply/coordinated.rs`).
        num_consumers: Option<u32>,
        limits: Limits,
    },
    /// Gets or creates (job, repetition) with one task per registered worker, and
    /// adds a client to it.
    GetOrCreateIteration {
        job_id: JobId,
        repetition: u64,
        elements_per_split: u64,
        limits: Limits,
    },
    ReleaseClient {
        client_id: ClientId,
    },
    /// Registers (or re-registers) a worker and gives it a task in every unfinished
    /// iteration it has none in and whose pipeline it can run (up to
    /// `limits.max_tasks_per_worker`).
    RegisterWorker {
        address: String,
        worker_uid: u64,
        functions: Vec<String>,
        /// The Python version its Python processes run; `None`: no Python stages.
        python_version: Option<String>,
        limits: Limits,
    },
    /// Tasks that reached end of sequence on `worker_address`, reported by the
    /// process `worker_uid` (refused unless it is the registered one). Unknown ids
    /// are ignored (one stale id must not block the others' reports).
    FinishTasks {
        worker_address: String,
        worker_uid: u64,
        task_ids: Vec<TaskId>,
    },
    /// Hands out the next split of a task's source, idempotently per
    /// (task_id, worker_uid, sequence).
    GetSplit {
        task_id: TaskId,
        worker_uid: u64,
        sequence: u64,
        provider: u32,
        repetition: u64,
        /// Up to this many consecutive splits in one grant (clamped to
        /// 1..=`MAX_SPLITS_PER_GRANT`), answered as one range.
        max_splits: u32,
    },
    /// Several proposals that arrived together, applied in order, each on its own
    /// (one refused command does not affect the others): group commit above Raft,
    /// one log entry and one fsync for all of them. Batches do not nest: a batch
    /// inside a batch is refused when decoded (a forged entry cannot recurse the
    /// decoder) and again by `apply`.
    Batch(#[serde(deserialize_with = "unnested_batch")] Vec<Command>),
    /// Proposed by the leader's worker timer: the worker at `address` with
    /// `worker_uid` stopped heartbeating. A no-op if the worker is unknown, is
    /// already lost, or re-registered meanwhile as another process (another uid).
    WorkerLost {
        address: String,
        worker_uid: u64,
    },
    /// Proposed by the leader's GC timer: the iteration had no consumer for
    /// `job_gc_timeout`. A no-op if it finished, was collected, or gained a client.
    GcIteration {
        iteration_id: IterationId,
    },
    /// Every pending task of the coordinated iteration joins the rounds at
    /// `starting_round`. Proposed once every consumer reported it is paused at
    /// a round ≤ `starting_round` (see `coordinated_reads.rs`).
    CoordinatedPromoteTasks {
        iteration_id: IterationId,
        starting_round: u64,
    },
    /// All consumers voted a task out (MaybeRemoveTask); `round` is the highest
    /// round voted. Consumers skip the task from then on.
    CoordinatedRemoveTask {
        task_id: TaskId,
        round: u64,
    },
    /// Proposed by the leader's timer: the iteration stopped handing out work
    /// and has had no consumer for `finished_job_ttl`. Drops it, its tasks and
    /// clients, and its job if it was the job's last (`apply/forget.rs`). A
    /// no-op if it is live or has a consumer again.
    ForgetIteration {
        iteration_id: IterationId,
    },
    // Exactly-once delivery (docs/exactly-once.md; `apply/exactly_once/`).
    // Appended, so that logged commands keep their bincode variant indices.
    /// `GetOrCreateJob` asked with `require_exactly_once`. `replay` is the
    /// pipeline's replayability as the handler checked it: `Ok(rule)` (how many
    /// records a unit has) or `Err(reason)` naming the stage that prevents it.
    GetOrCreateExactlyOnceJob {
        dataset_id: DatasetId,
        mode: Mode,
        job_name: Option<String>,
        target_workers: TargetWorkers,
        static_workers: Vec<String>,
        cross_trainer_cache: bool,
        num_consumers: Option<u32>,
        replay: Result<UnitRecords, String>,
        limits: Limits,
    },
    /// A consumer's `ConsumedReport`: records consumed (after `generation`
    /// positions), unit ends, and the lost tasks it is done with. Applying it
    /// twice is harmless.
    ReportConsumed {
        client_id: ClientId,
        generation: u64,
        runs: Vec<Run>,
        unit_ends: Vec<(u64, u64)>,
        lost_tasks_done: Vec<TaskId>,
    },
    /// `GetOrCreateIteration` with a position to restore: joins the iteration
    /// restored from the same position, or ends the current one and starts a
    /// new one whose consumed records are the position's.
    RestoreIteration {
        job_id: JobId,
        repetition: u64,
        elements_per_split: u64,
        position: RestorePoint,
        limits: Limits,
    },
    /// The end-of-epoch sweep of an exactly-once iteration (docs/exactly-once.md):
    /// the leader heard every consumer in `drained` report that it holds nothing
    /// of the iteration's first `tasks` tasks. If every task ended, there are
    /// exactly `tasks`, and `drained` covers every current consumer, the granted
    /// units that are not whole are read again; otherwise nothing changes.
    SweepIteration {
        iteration_id: IterationId,
        tasks: u64,
        drained: Vec<ClientId>,
    },
    /// `GetOrCreateJob` with `require_exactly_once` and a deterministic order
    /// (`crate::order`): as `GetOrCreateExactlyOnceJob`, and refused unless the
    /// handler found the pipeline's order deterministic (`ordered`). Persisted
    /// layout version 3.
    GetOrCreateOrderedJob {
        dataset_id: DatasetId,
        mode: Mode,
        job_name: Option<String>,
        target_workers: TargetWorkers,
        static_workers: Vec<String>,
        cross_trainer_cache: bool,
        num_consumers: Option<u32>,
        replay: Result<UnitRecords, String>,
        limits: Limits,
        order: Order,
        ordered: Result<(), String>,
    },
    /// `ReportConsumed` with spans of first records: `firsts` are
    /// `(begin, count)` pairs, record 0 of each unit of the span (one entry for
    /// many one-element units, docs/performance.md "Exactly once"). A report
    /// without spans is still proposed as `ReportConsumed`. Persisted layout
    /// version 4.
    ReportConsumedSpans {
        client_id: ClientId,
        generation: u64,
        runs: Vec<Run>,
        firsts: Vec<(u64, u64)>,
        unit_ends: Vec<(u64, u64)>,
        lost_tasks_done: Vec<TaskId>,
    },
    /// A command that may create something (`RegisterDataset`, the job and
    /// iteration commands), with who asked and the quotas (`quotas.rs`): what
    /// it creates is charged to the caller's identity, and refused past its
    /// quota. Never inside another `Charged`, and never around a `Batch`.
    /// Persisted layout version 5.
    Charged {
        charge: Charge,
        #[serde(deserialize_with = "uncharged")]
        command: Box<Command>,
    },
    /// Proposed by the leader's timer: the dataset has had no job over it and
    /// was not registered again for `unused_dataset_ttl`, and `uses` is the
    /// use count it saw (`owners.rs`). A no-op if a job uses it or its use
    /// count moved. Persisted layout version 5.
    ForgetDataset {
        dataset_id: DatasetId,
        uses: u64,
    },
}

/// A decoded `Position` as `RestoreIteration` needs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestorePoint {
    pub job_name: String,
    pub dataset_id: DatasetId,
    pub repetition: u64,
    /// The restoring consumers continue counting positions from here.
    pub generation: u64,
    pub consumed: RecordSet,
    /// `Position::restore_key`: equal positions restore one iteration.
    pub key: u64,
}

thread_local! {
    /// This thread is decoding a batch's elements.
    static IN_BATCH: Cell<bool> = const { Cell::new(false) };
    /// This thread is decoding a charged command.
    static IN_CHARGED: Cell<bool> = const { Cell::new(false) };
}

/// Decodes what a wrapper (`Batch`, `Charged`) holds with `flag` set, refusing
/// a wrapper of the same kind inside before decoding it: the decoder recurses
/// once per level, so an unbounded nesting in a forged message would overflow
/// the stack. The flag is cleared after (also on error).
fn unnested<'de, D, T>(
    flag: &'static LocalKey<Cell<bool>>,
    what: &'static str,
    d: D,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Clear(&'static LocalKey<Cell<bool>>);
    impl Drop for Clear {
        fn drop(&mut self) {
            self.0.with(|b| b.set(false));
        }
    }
    if flag.with(|b| b.replace(true)) {
        return Err(serde::de::Error::custom(what));
    }
    let _clear = Clear(flag);
    T::deserialize(d)
}

fn unnested_batch<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Command>, D::Error> {
    unnested(&IN_BATCH, "a Batch inside a Batch: batches do not nest", d)
}

fn uncharged<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<Command>, D::Error> {
    unnested(&IN_CHARGED, "a Charged command inside a Charged one: charges do not nest", d)
}

impl Command {
    /// Whether applying this command may change what a heartbeat answers: a
    /// worker's tasks to start or stop (`worker_view.rs`) or a consumer's view of
    /// its iteration (`client_view.rs`: tasks, their workers, finished flags, the
    /// iteration's end). Held heartbeats wake only for a batch where this holds
    /// (`raft/state_machine.rs`), so the steady stream of grants does not re-read
    /// every held view at each commit. `GetSplit` moves a split cursor and the
    /// task's last answer (and an exactly-once iteration's grant bookkeeping),
    /// none of which a heartbeat answer shows; every other command is assumed to
    /// change a view.
    pub fn may_change_views(&self) -> bool {
        match self {
            Command::GetSplit { .. } => false,
            Command::Batch(commands) => commands.iter().any(Command::may_change_views),
            Command::Charged { command, .. } => command.may_change_views(),
            _ => true,
        }
    }

    /// Short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Command::RegisterDataset { .. } => "RegisterDataset",
            Command::GetOrCreateJob { .. } => "GetOrCreateJob",
            Command::GetOrCreateIteration { .. } => "GetOrCreateIteration",
            Command::ReleaseClient { .. } => "ReleaseClient",
            Command::RegisterWorker { .. } => "RegisterWorker",
            Command::FinishTasks { .. } => "FinishTasks",
            Command::GetSplit { .. } => "GetSplit",
            Command::Batch(_) => "Batch",
            Command::WorkerLost { .. } => "WorkerLost",
            Command::GcIteration { .. } => "GcIteration",
            Command::CoordinatedPromoteTasks { .. } => "CoordinatedPromoteTasks",
            Command::CoordinatedRemoveTask { .. } => "CoordinatedRemoveTask",
            Command::ForgetIteration { .. } => "ForgetIteration",
            Command::GetOrCreateExactlyOnceJob { .. } => "GetOrCreateExactlyOnceJob",
            Command::ReportConsumed { .. } => "ReportConsumed",
            Command::RestoreIteration { .. } => "RestoreIteration",
            Command::SweepIteration { .. } => "SweepIteration",
            Command::GetOrCreateOrderedJob { .. } => "GetOrCreateOrderedJob",
            Command::ReportConsumedSpans { .. } => "ReportConsumedSpans",
            Command::Charged { command, .. } => command.name(),
            Command::ForgetDataset { .. } => "ForgetDataset",
        }
    }
}

/// What a successfully applied command answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    DatasetRegistered {
        dataset_id: DatasetId,
    },
    Job {
        job_id: JobId,
        job_name: String,
        /// The job's delivery is exactly-once (docs/exactly-once.md).
        exactly_once: bool,
    },
    Iteration {
        iteration_id: IterationId,
        client_id: ClientId,
    },
    ClientReleased,
    /// The worker's unfinished tasks after registration.
    WorkerRegistered {
        tasks: Vec<TaskId>,
    },
    TasksFinished {
        finished_iterations: Vec<IterationId>,
    },
    Split(SplitAnswer),
    /// One result per command of a `Batch`, in order.
    Batch(Vec<Result<Response, StateError>>),
    /// `changed` is false when the command was a no-op (already applied, or
    /// overtaken by a re-registration or a new client).
    WorkerLost {
        changed: bool,
    },
    IterationCollected {
        changed: bool,
    },
    /// The tasks that joined the rounds (empty: none was pending).
    CoordinatedPromoted {
        task_ids: Vec<TaskId>,
    },
    CoordinatedRemoved,
    /// `changed` is false when the iteration was kept (live, read, or already
    /// forgotten); `job_forgotten` when its job went with it.
    IterationForgotten {
        changed: bool,
        job_forgotten: bool,
    },
    ConsumedReported,
    /// An exactly-once grant with records of its units already consumed: the
    /// worker's source skips `skip_runs`.
    SplitSkipping {
        answer: SplitAnswer,
        skip_runs: Vec<Run>,
    },
    /// `orphans` unit ranges were turned over to be read again (0: the sweep
    /// was not due, or nothing was left to read).
    Swept {
        orphans: u64,
    },
    /// A grant of a deterministic-order iteration: its place in the order and
    /// its split's whole range (`crate::order`).
    OrderedSplit {
        answer: SplitAnswer,
        skip_runs: Vec<Run>,
        place: Place,
    },
    /// `changed` is false when the dataset was kept (used again, or already
    /// forgotten).
    DatasetForgotten {
        changed: bool,
    },
}
