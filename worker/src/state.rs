//! [`Worker`]: the state shared by the gRPC service (which looks tasks up and marks
//! them finished) and the heartbeat loop (which starts and deletes them).
//!
//! Soft state, all of it: the task table, the finished-but-unreported ids and the
//! memory of ended tasks are rebuilt after a restart from what the dispatcher hands
//! back on registration; tasks this process had finished but not yet reported are
//! run again, which the dispatcher treats like any unfinished task.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_client::DispatcherClient;
use sluice_dataset::FunctionRegistry;
use sluice_proto::task_set::task_set_digest;
use sluice_proto::v1 as pb;
use tokio::runtime::Handle;
use tokio::sync::{watch, Notify};

use crate::buffer::StopReason;
use crate::config::WorkerConfig;
use crate::counters::Counters;
use crate::runner::RunnerContext;
use crate::task::{Task, TaskContext};

/// Ended tasks remembered (so late requests get end_of_sequence or "deleted"
/// instead of "not known yet"); the oldest are forgotten past this many.
const ENDED_MEMORY: usize = 65_536;

pub(crate) struct Worker {
    pub address: String,
    pub worker_uid: u64,
    pub config: WorkerConfig,
    pub dispatcher: DispatcherClient,
    tasks: TaskContext,
    /// A std `Mutex`: every critical section is a few map operations, never an `.await`.
    table: Mutex<TaskTable>,
    /// Wakes the heartbeat loop early: a task finished and the dispatcher should know.
    pub task_finished: Notify,
    /// Counts the heartbeats that reported finished tasks (and forgettings of
    /// all of them): what [`Worker::until_reported`] waits on.
    reports: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    /// Why the dispatcher refused this worker for good, once it did.
    refused: Mutex<Option<String>>,
    /// True once the worker drains (see `drain.rs`): no new tasks, streams, splits.
    pub draining: watch::Sender<bool>,
    /// True while the dispatcher knows this worker: set by a registration, cleared
    /// when the dispatcher turns out to have forgotten it (the health service's
    /// input, see `health.rs`).
    pub registered: watch::Sender<bool>,
    /// This process's metric counters (`counters.rs`, served by `metrics.rs`).
    pub counters: Counters,
}

/// What a request finds under its task id (the service turns all but `Running`
/// into its answer).
pub(crate) enum Lookup {
    Running(Arc<Task>),
    Finished,
    Deleted,
    ShuttingDown,
    /// Not assigned yet as far as this process knows: the client should retry.
    Unknown,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    Finished,
    Deleted,
}

#[derive(Default)]
struct TaskTable {
    running: HashMap<u64, Arc<Task>>,
    ended: HashMap<u64, Ended>,
    /// Insertion order of `ended`, for forgetting the oldest.
    ended_order: VecDeque<u64>,
    /// Finished tasks no successful heartbeat has carried yet.
    unreported: BTreeSet<u64>,
    shutting_down: bool,
    /// Tasks ever started by this process (for `exit_when_idle`).
    started: u64,
}

impl TaskTable {
    fn remember(&mut self, task_id: u64, ended: Ended) {
        if self.ended.insert(task_id, ended).is_none() {
            self.ended_order.push_back(task_id);
        }
        while self.ended_order.len() > ENDED_MEMORY {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }
}

impl Worker {
    pub(crate) fn new(
        address: String,
        worker_uid: u64,
        config: WorkerConfig,
        registry: FunctionRegistry,
        dispatcher: DispatcherClient,
        runtime: Handle,
    ) -> Self {
        let draining = watch::channel(false).0;
        let runner = RunnerContext {
            registry,
            dispatcher: dispatcher.clone(),
            runtime,
            worker_uid,
            splits_per_request: config.splits_per_request,
            draining: draining.subscribe(),
        };
        let tasks = TaskContext {
            runner,
            worker_address: address.clone(),
            buffer_elements: config.task_buffer_elements,
            cross_trainer_cache_bytes: config.cross_trainer_cache_bytes,
        };
        Worker {
            address,
            worker_uid,
            config,
            dispatcher,
            tasks,
            table: Mutex::new(TaskTable::default()),
            task_finished: Notify::new(),
            reports: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            refused: Mutex::new(None),
            draining,
            registered: watch::channel(false).0,
            counters: Default::default(),
        }
    }

    fn table(&self) -> MutexGuard<'_, TaskTable> {
        // A panic while holding the lock leaves the maps consistent (no section
        // spans two updates that must go together), so poisoning is ignored.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn lookup(&self, task_id: u64) -> Lookup {
        let table = self.table();
        let draining = *self.draining.borrow();
        if table.shutting_down {
            return Lookup::ShuttingDown;
        }
        if let Some(task) = table.running.get(&task_id) {
            // Draining, a DYNAMIC task still serves new streams: the splits it holds
            // were handed to this worker alone, and a reader that was not streaming
            // when the drain began (paused, reconnecting, not yet told of the task)
            // must still get them. Other tasks' data is elsewhere too (static shards
            // come back with the worker; OFF repeats the dataset): refused.
            if draining && !task.dynamic {
                return Lookup::ShuttingDown;
            }
            return Lookup::Running(task.clone());
        }
        if draining {
            return Lookup::ShuttingDown;
        }
        match table.ended.get(&task_id) {
            Some(Ended::Finished) => Lookup::Finished,
            Some(Ended::Deleted) => Lookup::Deleted,
            None => Lookup::Unknown,
        }
    }

    /// Starts the tasks not running yet (registration answers and `new_tasks`).
    pub(crate) fn start_tasks(self: &Arc<Self>, defs: Vec<pb::TaskDef>) {
        for def in defs {
            let task_id = def.task_id;
            {
                let mut table = self.table();
                if table.shutting_down
                    || *self.draining.borrow()
                    || table.running.contains_key(&task_id)
                {
                    continue;
                }
                // Finished here but the dispatcher has not heard yet: the pending
                // report will tell it; running it again would repeat its elements.
                if table.unreported.contains(&task_id) {
                    continue;
                }
                // The dispatcher wants it run (again): forget how it ended before.
                table.ended.remove(&task_id);
            }
            // Outside the lock: starting spawns a thread.
            let task = Task::start(def, &self.tasks);
            let mut table = self.table();
            if table.shutting_down {
                task.stop(StopReason::ShuttingDown);
                continue;
            }
            tracing::info!(task_id, iteration_id = task.iteration_id, "task started");
            table.running.insert(task_id, task.clone());
            table.started += 1;
            drop(table);
            // Finishes the task if its pipeline ends with nobody left to read the end
            // (a stream that sees it first finishes it the usual way). Coordinated and
            // cache tasks need an infinite pipeline: their end is an error their own
            // readers report.
            if task.rounds.is_some() || task.cache.is_some() {
                continue;
            }
            // Weak references: a deleted or stopped task must still be dropped (which
            // closes its buffer and so releases a pipeline thread blocked on it).
            let done = task.take_pipeline_done();
            let (task, worker) = (Arc::downgrade(&task), Arc::downgrade(self));
            self.tasks.runner.runtime.spawn(async move {
                // `None`: the thread never started. An error: it panicked. Same check.
                if let Some(done) = done {
                    let _ = done.await;
                }
                let (Some(task), Some(worker)) = (task.upgrade(), worker.upgrade()) else {
                    return;
                };
                if task.buffer.ended_when_drained().await {
                    worker.finish(&task);
                }
            });
        }
    }

    /// Called by the stream that saw end of sequence. Only the task object still in
    /// the table counts, so a stale stream cannot finish a restarted task.
    pub(crate) fn finish(&self, task: &Arc<Task>) {
        let mut table = self.table();
        let current = table.running.get(&task.task_id).is_some_and(|t| Arc::ptr_eq(t, task));
        if !current {
            return;
        }
        table.running.remove(&task.task_id);
        table.remember(task.task_id, Ended::Finished);
        table.unreported.insert(task.task_id);
        drop(table);
        tracing::info!(task_id = task.task_id, iteration_id = task.iteration_id, "task finished");
        self.task_finished.notify_one();
    }

    /// Stops and forgets the tasks the dispatcher no longer wants (`tasks_to_delete`).
    pub(crate) fn delete_tasks(&self, task_ids: &[u64]) {
        for &task_id in task_ids {
            let removed = {
                let mut table = self.table();
                let removed = table.running.remove(&task_id);
                if removed.is_some() {
                    table.remember(task_id, Ended::Deleted);
                }
                removed
            };
            if let Some(task) = removed {
                tracing::info!(task_id, iteration_id = task.iteration_id, "task deleted");
                task.stop(StopReason::Deleted);
            }
        }
    }

    pub(crate) fn register_request(&self) -> pb::RegisterWorkerRequest {
        pb::RegisterWorkerRequest {
            address: self.address.clone(),
            worker_uid: self.worker_uid,
            functions: self.tasks.runner.registry.names(),
            python_version: (self.tasks.runner.registry.python())
                .map(|p| p.version().to_string())
                .unwrap_or_default(),
        }
    }

    /// The next heartbeat. `active_digest` is the `active_tasks_digest` of the
    /// last answer acted on: when the running tasks have that digest, the
    /// dispatcher already knows them, and the list is left out.
    pub(crate) fn heartbeat_request(
        &self,
        active_digest: Option<u64>,
    ) -> pb::WorkerHeartbeatRequest {
        let table = self.table();
        let digest = task_set_digest(table.running.keys().copied());
        let omitted = active_digest == Some(digest);
        let mut current_tasks: Vec<u64> =
            if omitted { vec![] } else { table.running.keys().copied().collect() };
        current_tasks.sort_unstable();
        pb::WorkerHeartbeatRequest {
            address: self.address.clone(),
            worker_uid: self.worker_uid,
            current_tasks,
            finished_tasks: table.unreported.iter().copied().collect(),
            wait_for_change_ms: 0,
            errors_ignored: (self.tasks.runner.registry.errors_ignored())
                .load(std::sync::atomic::Ordering::Relaxed),
            current_tasks_digest: digest,
            current_tasks_omitted: omitted,
        }
    }

    /// A heartbeat carrying these finished tasks succeeded.
    pub(crate) fn reported(&self, finished_tasks: &[u64]) {
        let mut table = self.table();
        for task_id in finished_tasks {
            table.unreported.remove(task_id);
        }
        drop(table);
        if !finished_tasks.is_empty() {
            self.reports.send_modify(|n| *n += 1);
        }
    }

    /// Returns once the dispatcher has been told that `task_id` finished (at
    /// once if it is not waiting to be reported). A stream holds a task's
    /// end_of_sequence until then: a worker killed between delivering the end
    /// and reporting it would otherwise leave the dispatcher believing the task
    /// unfinished, and a restarted worker would run it again for consumers that
    /// already saw its end and never read it, so the iteration never ended
    /// (issue 31, found by the chaos `off` scenario under load).
    pub(crate) async fn until_reported(&self, task_id: u64) {
        let mut reports = self.reports.subscribe();
        while self.table().unreported.contains(&task_id) {
            if reports.changed().await.is_err() {
                return;
            }
        }
    }

    /// The dispatcher no longer knows this worker: it lost its state (an in-memory
    /// dispatcher restarted), so every task id this process knows is meaningless and
    /// may even be reused for a different task. Stop and forget all of them.
    pub(crate) fn forget_all_tasks(&self) {
        self.registered.send_replace(false);
        let tasks: Vec<Arc<Task>> = {
            let mut table = self.table();
            table.ended.clear();
            table.ended_order.clear();
            table.unreported.clear();
            table.running.drain().map(|(_, task)| task).collect()
        };
        self.reports.send_modify(|n| *n += 1);
        for task in tasks {
            tracing::info!(task_id = task.task_id, "task forgotten: the dispatcher lost its state");
            task.stop(StopReason::Deleted);
        }
    }

    /// Stops every task and the heartbeat loop; later requests get Unavailable.
    pub(crate) fn shut_down(&self) {
        let tasks: Vec<Arc<Task>> = {
            let mut table = self.table();
            table.shutting_down = true;
            table.running.drain().map(|(_, task)| task).collect()
        };
        for task in tasks {
            task.stop(StopReason::ShuttingDown);
        }
        self.shutdown.send_replace(true);
    }

    /// The dispatcher refused this worker for good: remember why, and stop.
    pub(crate) fn refuse(&self, reason: String) {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
        self.shut_down();
    }

    pub(crate) fn refusal(&self) -> Option<String> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What `drain.rs` decides on: the running tasks, how many tasks this process
    /// ever started, and how many finished tasks the dispatcher has not heard of.
    pub(crate) fn activity(&self) -> (Vec<Arc<Task>>, u64, usize) {
        let table = self.table();
        (table.running.values().cloned().collect(), table.started, table.unreported.len())
    }

    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}
