//! The dispatcher's durable state: everything that must survive a restart and that
//! every replica must agree on. It changes only through `apply` (see `apply/`);
//! readers get `&State`, and the queries `apply`'s modules share are methods here
//! (at the end of this file), so none of them calls back into another.
//!
//! Ids come from counters kept here and advanced by `apply`, so replaying the same
//! commands rebuilds the same ids (the counters start in distinct ranges, as in
//! tf.data, so ids are recognisable in logs).
//!
//! The task map, by far the largest part (400,000 tasks at 2,000 workers and 200
//! jobs), is a persistent B-tree ([`TaskMap`]): cloning the state shares it, so a
//! snapshot copies the state in milliseconds and encodes the copy while `apply`
//! goes on (`raft/state_machine.rs`). Its encoding is a plain map's, so the
//! persisted layout is the one a `BTreeMap` had.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_dataset::python::PythonNeeds;
use sluice_dataset::{DatasetDef, StaticPolicy};

use crate::error::StateError;
use crate::exactly_once::ExactlyOnceState;
pub use crate::ids::{ClientId, DatasetId, IterationId, JobId, TaskId};
use crate::owners::Owners;

/// The tasks by id: a persistent (structurally shared) ordered map. A clone is
/// O(1); a change copies only the nodes on its path that a clone still shares.
/// Serialized as a map in key order, the bytes a `BTreeMap` gives; decoded by
/// [`deserialize_task_map`].
pub type TaskMap = imbl::OrdMap<TaskId, Task>;

/// Decodes a [`TaskMap`] entry by entry. imbl's own `Deserialize` reserves the
/// length prefix's count of entries before reading one, so a forged prefix
/// (a snapshot or AppendEntries from the network) asked for a terabyte; here
/// nothing is reserved, and a prefix beyond the input ends at the input's end.
pub fn deserialize_task_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<TaskMap, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = TaskMap;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of task ids to tasks")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<TaskMap, A::Error> {
            let mut tasks = TaskMap::new();
            while let Some((id, task)) = a.next_entry()? {
                tasks.insert(id, task);
            }
            Ok(tasks)
        }
    }
    d.deserialize_map(Entries)
}

/// How a job's data is divided among workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Every worker processes the whole dataset ("parallel_epochs").
    Off,
    /// Splits of the source are handed out, each to one worker ("distributed_epoch").
    Dynamic,
    // Static sharding over the job's `static_workers` (appended after the first two
    // so that logged commands keep their bincode variant indices).
    /// Worker `i` of `n` reads the files `f` with `f mod n == i`.
    File,
    /// Worker `i` of `n` keeps the output elements with index `mod n == i`.
    Data,
    /// FILE for a file source with at least `n` files, DATA otherwise.
    FileOrData,
    /// Every `shard(SHARD_HINT, SHARD_HINT)` becomes `shard(n, i)`.
    Hint,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "OFF",
            Mode::Dynamic => "DYNAMIC",
            Mode::File => "FILE",
            Mode::Data => "DATA",
            Mode::FileOrData => "FILE_OR_DATA",
            Mode::Hint => "HINT",
        }
    }

    /// The static sharding policy of a static mode; `None` for OFF and DYNAMIC.
    pub fn static_policy(self) -> Option<StaticPolicy> {
        match self {
            Mode::Off | Mode::Dynamic => None,
            Mode::File => Some(StaticPolicy::File),
            Mode::Data => Some(StaticPolicy::Data),
            Mode::FileOrData => Some(StaticPolicy::FileOrData),
            Mode::Hint => Some(StaticPolicy::Hint),
        }
    }
}

/// Which workers' tasks the consumers of a job read. Part of the job's identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TargetWorkers {
    /// ANY: Sluice has no COLOCATED worker tags (docs/architecture.md).
    #[default]
    Auto,
    Any,
    /// Only workers running in the consumer's own process.
    Local,
}

impl TargetWorkers {
    pub fn name(self) -> &'static str {
        match self {
            TargetWorkers::Auto => "AUTO",
            TargetWorkers::Any => "ANY",
            TargetWorkers::Local => "LOCAL",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub id: DatasetId,
    #[serde(with = "crate::def_serde")]
    pub def: DatasetDef,
    /// Elements of the source per epoch; what dynamic sharding splits.
    pub source_cardinality: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub name: String,
    /// Anonymous jobs are private to the client that created them.
    pub anonymous: bool,
    pub dataset_id: DatasetId,
    pub mode: Mode,
    pub target_workers: TargetWorkers,
    /// Static modes: the dispatcher's `worker_addresses` when the job was created.
    /// Worker `i` of the shard is `static_workers[i]`; later configuration changes
    /// do not move an existing job's shards. Empty for OFF and DYNAMIC.
    pub static_workers: Vec<String>,
    /// repetition → iteration.
    pub iterations: BTreeMap<u64, IterationId>,
    /// Consumers read through each worker's cross-trainer cache (a sliding window
    /// every trainer reads at its own cursor). Part of the job's identity.
    pub cross_trainer_cache: bool,
    /// Coordinated reads: consumers reading in rounds. Part of the job's identity.
    pub num_consumers: Option<u32>,
}

/// Where dynamic sharding stands for one source of one iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitCursor {
    /// The epoch being handed out.
    pub repetition: u64,
    /// Next source element index of that epoch not yet handed out.
    pub next: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    pub id: IterationId,
    pub job_id: JobId,
    pub repetition: u64,
    /// In creation order; clients read them in this order.
    pub tasks: Vec<TaskId>,
    pub clients: BTreeSet<ClientId>,
    /// One per source (split provider); empty unless DYNAMIC.
    pub cursors: Vec<SplitCursor>,
    /// Source elements per split, fixed when the iteration is created.
    pub elements_per_split: u64,
    /// Every task has reached end of sequence (and there is at least one task).
    pub finished: bool,
    // Liveness and GC (docs/architecture.md, "Liveness and garbage collection").
    /// DYNAMIC: split ranges granted to tasks whose worker was lost or restarted
    /// before it could deliver them (see `apply/liveness.rs`).
    pub lost_splits: Vec<LostSplit>,
    /// Tasks ended because their worker was lost: in OFF an incomplete copy, in a
    /// static mode an incomplete shard, in DYNAMIC the splits above.
    pub lost_tasks: BTreeSet<TaskId>,
    /// Collected after `job_gc_timeout` without a consumer: its tasks were ended
    /// and nobody may join it again (a new reader gets a new iteration).
    pub garbage_collected: bool,
    /// Coordinated reads (the job has `num_consumers`): tasks waiting to join the
    /// rounds and tasks voted out. See `apply/coordinated.rs`.
    pub coordinated: Option<CoordinatedIteration>,
}

/// A split range a lost (or restarted) worker held: granted, never known delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostSplit {
    pub task_id: TaskId,
    /// Source element indices `[begin, end)`, as granted.
    pub begin: u64,
    pub end: u64,
}

/// The replicated part of the coordinated-read protocol of one iteration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatedIteration {
    pub num_consumers: u32,
    /// Tasks of workers that joined after the iteration started, in arrival order;
    /// not yet in `Iteration::tasks` (consumers do not read them yet).
    pub pending: Vec<TaskId>,
    /// Tasks voted out by all consumers → the highest round voted.
    pub removed: BTreeMap<TaskId, u64>,
}

/// A split hand-out as answered to a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SplitAnswer {
    Split {
        begin: u64,
        end: u64,
    },
    EndOfSplits,
    /// Exactly-once: nothing now, but the epoch is not over (a lost task's units
    /// wait for every consumer's acknowledgement): ask again after a backoff.
    /// Appended: the variant indices of the others are persisted.
    Wait,
}

/// The last GetSplit answered for a task: replaying the same key returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitRecord {
    pub worker_uid: u64,
    pub sequence: u64,
    pub answer: SplitAnswer,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub iteration_id: IterationId,
    pub worker_address: String,
    /// Static modes: the worker's position in the job's `static_workers`, i.e. which
    /// shard this task reads. 0 otherwise.
    pub worker_index: u32,
    pub finished: bool,
    pub last_split: Option<SplitRecord>,
    /// Ended because its worker was lost (`Command::WorkerLost`), not by reaching
    /// end of sequence.
    pub lost: bool,
    /// Coordinated reads: the first round consumers read this task in (0 for the
    /// tasks an iteration starts with; the agreed round for a task that joined).
    pub starting_round: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Worker {
    pub address: String,
    /// Changes when the worker process restarts.
    pub worker_uid: u64,
    /// Registry functions it advertised ("map:square", …).
    pub functions: BTreeSet<String>,
    /// Its tasks that have not finished. Shared, not copied, with the long polls
    /// that hold a worker's heartbeat (`worker_view.rs`: the set a held digest
    /// heartbeat was decided against); `apply` changes it through
    /// [`Worker::active_tasks_mut`], which copies it only while such a poll
    /// holds it. Encoded as the set itself (serde's `rc`): the persisted
    /// layout is the same as a plain `BTreeSet`'s.
    pub active_tasks: Arc<BTreeSet<TaskId>>,
    /// Declared lost by the leader's worker timeout; cleared when it registers again.
    pub lost: bool,
    /// The Python version its pool of Python processes runs (`3.11.7`), as it
    /// registered; `None`: it runs no Python stage (started without
    /// `--allow-python`). Decides which jobs' tasks it gets (`State::can_run`).
    pub python_version: Option<String>,
}

impl Worker {
    /// Its active tasks, to change (copied first if a held heartbeat shares them).
    pub fn active_tasks_mut(&mut self) -> &mut BTreeSet<TaskId> {
        Arc::make_mut(&mut self.active_tasks)
    }

    /// Whether this worker can run a pipeline that asks `needs` of its workers.
    pub fn can_run(&self, needs: &PythonNeeds) -> bool {
        needs.admits(self.python_version.as_deref())
    }
}

/// The whole replicated state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub datasets: BTreeMap<DatasetId, Dataset>,
    pub jobs: BTreeMap<JobId, Job>,
    pub jobs_by_name: BTreeMap<String, JobId>,
    pub iterations: BTreeMap<IterationId, Iteration>,
    #[serde(deserialize_with = "deserialize_task_map")]
    pub tasks: TaskMap,
    pub workers: BTreeMap<String, Worker>,
    pub clients: BTreeMap<ClientId, IterationId>,
    pub next_dataset_id: u64,
    pub next_job_id: JobId,
    pub next_iteration_id: IterationId,
    pub next_task_id: TaskId,
    pub next_client_id: ClientId,
    /// Exactly-once delivery (`exactly_once.rs`). Last, and new in persisted
    /// layout version 2: version 1 is `raft/layout_v1.rs`'s `State`, this
    /// struct without it. Version 3 appended the section's `orders`
    /// (`raft/layout_v2.rs`).
    pub exactly_once: ExactlyOnceState,
    /// Who made what, definition sizes, dataset uses (`owners.rs`): the
    /// quotas' ledger. Last, and new in persisted layout version 5
    /// (`raft/layout_v4.rs` is this struct without it).
    pub owners: Owners,
}

impl Default for State {
    fn default() -> Self {
        State {
            datasets: BTreeMap::new(),
            jobs: BTreeMap::new(),
            jobs_by_name: BTreeMap::new(),
            iterations: BTreeMap::new(),
            tasks: TaskMap::new(),
            workers: BTreeMap::new(),
            clients: BTreeMap::new(),
            next_dataset_id: 1000,
            next_iteration_id: 2000,
            next_client_id: 3000,
            next_task_id: 4000,
            next_job_id: 5000,
            exactly_once: ExactlyOnceState::default(),
            owners: Owners::default(),
        }
    }
}

impl Iteration {
    /// Still handing out work: neither finished nor garbage-collected.
    pub fn is_live(&self) -> bool {
        !self.finished && !self.garbage_collected
    }

    /// Splits in `lost_splits` (a grant of several splits is one range).
    pub fn lost_split_count(&self) -> u64 {
        let per = self.elements_per_split.max(1);
        self.lost_splits.iter().map(|l| l.end.saturating_sub(l.begin).div_ceil(per)).sum()
    }

    /// Source elements in `lost_splits`.
    pub fn lost_elements(&self) -> u64 {
        self.lost_splits.iter().map(|l| l.end.saturating_sub(l.begin)).sum()
    }

    /// DYNAMIC: (splits, source elements) handed out so far over the split
    /// cursors, for a source of `cardinality` elements (0 if unknown). A cursor at
    /// (repetition r, next n) has handed out r whole epochs and n elements of the
    /// current one.
    pub fn handed_out(&self, cardinality: u64) -> (u64, u64) {
        let per = self.elements_per_split.max(1);
        self.cursors.iter().fold((0u64, 0u64), |(splits, elements), c| {
            let epochs = c.repetition.saturating_mul(cardinality.div_ceil(per));
            (
                splits.saturating_add(epochs.saturating_add(c.next.div_ceil(per))),
                elements.saturating_add(
                    c.repetition.saturating_mul(cardinality).saturating_add(c.next),
                ),
            )
        })
    }
}

impl Job {
    /// Whether the job shards statically (FILE, DATA, FILE_OR_DATA, HINT).
    pub fn is_static(&self) -> bool {
        self.mode.static_policy().is_some()
    }

    /// A worker's shard index in a static job; `None` when the job is not static
    /// or the worker is not in its list.
    pub fn shard_of(&self, address: &str) -> Option<u32> {
        if !self.is_static() {
            return None;
        }
        self.static_workers.iter().position(|a| a == address).map(|i| i as u32)
    }
}

impl State {
    /// The number of elements of `job_id`'s dataset's source, if known.
    pub fn source_cardinality_of(&self, job_id: JobId) -> Option<u64> {
        let job = self.jobs.get(&job_id)?;
        self.datasets.get(&job.dataset_id)?.source_cardinality
    }

    /// The iteration a client reads, if the client is known.
    pub fn client_iteration(&self, client_id: ClientId) -> Option<&Iteration> {
        self.clients.get(&client_id).and_then(|id| self.iterations.get(id))
    }

    /// Unfinished tasks assigned to `address`, in id order.
    pub fn worker_tasks(&self, address: &str) -> Vec<&Task> {
        self.workers
            .get(address)
            .map(|w| w.active_tasks.iter().filter_map(|t| self.tasks.get(t)).collect())
            .unwrap_or_default()
    }

    /// Whether any registered worker advertised `name` (e.g. "map:square").
    pub fn any_worker_has_function(&self, name: &str) -> bool {
        self.workers.values().any(|w| w.functions.contains(name))
    }

    /// The job of an iteration.
    pub fn job_of(&self, iteration_id: IterationId) -> Option<&Job> {
        self.iterations.get(&iteration_id).and_then(|it| self.jobs.get(&it.job_id))
    }

    /// What the pipeline of `job` asks of the workers that run it (its Python
    /// stages); nothing for an unknown dataset.
    pub fn python_needs(&self, job: &Job) -> PythonNeeds {
        self.datasets.get(&job.dataset_id).map(|d| d.def.python_needs()).unwrap_or_default()
    }

    /// Whether a worker at `address` takes part in an iteration: for OFF and
    /// DYNAMIC every worker that can run the pipeline (a job with Python stages
    /// only goes to workers whose Python admits it); for a static mode the listed
    /// ones (the list of a job with Python stages holds only workers that could
    /// run it when the job was made, see `apply/jobs.rs`; one that registers again
    /// without Python gets its shard's task anyway, whose Python stage then fails
    /// with an error the reader sees, rather than leaving the shard unread).
    pub fn takes_part(&self, iteration_id: IterationId, address: &str) -> bool {
        match self.job_of(iteration_id) {
            Some(job) if job.is_static() => job.static_workers.iter().any(|a| a == address),
            Some(job) => {
                self.workers.get(address).is_some_and(|w| w.can_run(&self.python_needs(job)))
            }
            None => false,
        }
    }

    /// Whether a reader that did not see lost task `t`'s end of sequence lost
    /// elements (`pb::TaskInfo::lost`). Yes, but for a DYNAMIC task (not
    /// exactly-once: there a lost task costs nothing, its units are read
    /// again) that provably never held one: no split range of it was recorded
    /// lost, and it was never granted a split (no answer on record, or its
    /// first answer, sequence 0, was end of splits). Such a task is a worker
    /// that came to a DYNAMIC epoch after the splits ran out: its loss must
    /// not fail a read that got every element.
    pub fn lost_task_held_elements(&self, t: &Task) -> bool {
        if !t.lost {
            return false;
        }
        let Some(it) = self.iterations.get(&t.iteration_id) else { return true };
        let dynamic = self.jobs.get(&it.job_id).is_some_and(|j| j.mode == Mode::Dynamic);
        if !dynamic || self.exactly_once.iterations.contains_key(&it.id) {
            return true;
        }
        let never_granted = match t.last_split {
            None => true,
            Some(r) => r.sequence == 0 && r.answer == SplitAnswer::EndOfSplits,
        };
        !never_granted || it.lost_splits.iter().any(|l| l.task_id == t.id)
    }

    /// Whether the end-of-epoch sweep (`SweepIteration`) may run now: the
    /// iteration is a live exactly-once one with no orphans waiting, it has
    /// exactly `tasks` tasks and all ended, `drained` names every current
    /// consumer (at least one), and some granted unit is not whole.
    pub fn sweep_due(&self, iteration_id: IterationId, tasks: u64, drained: &[ClientId]) -> bool {
        let Some(it) = self.iterations.get(&iteration_id).filter(|it| it.is_live()) else {
            return false;
        };
        let Some(p) = self.exactly_once.iterations.get(&iteration_id) else { return false };
        let known: Vec<_> = it.tasks.iter().filter_map(|t| self.tasks.get(t)).collect();
        if !p.orphans.is_empty()
            || known.len() as u64 != tasks
            || !known.iter().all(|t| t.finished)
            || it.clients.is_empty()
            || !it.clients.iter().all(|c| drained.contains(c))
        {
            return false;
        }
        p.granted.values().flatten().any(|(b, e)| !p.unfinished_ranges(*b, *e).is_empty())
    }

    /// Every task of the iteration reached end of sequence, and (static modes)
    /// every shard has a task: a worker of the list that has not registered yet
    /// still owes its shard. Exactly-once: also every unit was consumed (what a
    /// worker produced is not delivered until a consumer took it: a worker that
    /// dies before may still cost a reread) and no lost unit waits.
    pub fn iteration_complete(&self, it: &Iteration) -> bool {
        if let Some(p) = self.exactly_once.iterations.get(&it.id) {
            let units = self.source_cardinality_of(it.job_id).unwrap_or(0);
            if !p.orphans.is_empty() || p.consumed.watermark() < units {
                return false;
            }
        }
        let tasks: Vec<&Task> = it.tasks.iter().filter_map(|t| self.tasks.get(t)).collect();
        if !tasks.iter().all(|t| t.finished) {
            return false;
        }
        match self.jobs.get(&it.job_id) {
            Some(job) if job.is_static() => {
                let shards: BTreeSet<u32> = tasks.iter().map(|t| t.worker_index).collect();
                shards.len() == job.static_workers.len()
            }
            _ => true,
        }
    }

    /// The worker at `address` as registered by the process `worker_uid`: a
    /// request from another incarnation (a stale process, or someone else using
    /// the address) is refused, naming both uids. Unknown address: NotFound.
    pub fn registered_worker(&self, address: &str, worker_uid: u64) -> Result<&Worker, StateError> {
        let worker = self.workers.get(address).ok_or_else(|| {
            StateError::not_found_hint("worker", address, "; register the worker again")
        })?;
        if worker.worker_uid != worker_uid {
            return Err(StateError::FailedPrecondition(format!(
                "worker {address} is registered with worker_uid {}, but this request carries \
                 worker_uid {worker_uid}: it comes from another process than the registered \
                 one (a stale incarnation, or another identity); a worker registers \
                 (RegisterWorker) before it asks for splits or reports tasks",
                worker.worker_uid
            )));
        }
        Ok(worker)
    }

    /// Whether the task was voted out of its coordinated iteration.
    pub fn is_removed(&self, task: &Task) -> bool {
        self.iterations
            .get(&task.iteration_id)
            .and_then(|it| it.coordinated.as_ref())
            .is_some_and(|c| c.removed.contains_key(&task.id))
    }
}
