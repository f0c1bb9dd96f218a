//! One task: its buffer, the pipeline thread filling it, and what a job may put in
//! front of the buffer — a cross-trainer cache or coordinated rounds.
//!
//! ```text
//!              ┌──────────────────────────── Task ─────────────────────────────┐
//!  runner ────▶│ buffer ──▶ (cross-trainer cache | coordinated rounds)         │──▶ service
//!  (thread)    │ stop signal: deleted / shutting down (first reason wins)      │
//!              └───────────────────────────────────────────────────────────────┘
//! ```
//!
//! A task is shared (`Arc<Task>`) by the task table and every stream reading it.
//! Its pipeline thread stops when the buffer's receiver is dropped, i.e. when the
//! last `Arc<Task>` goes (task deleted or worker stopping, and every stream on it
//! ended).
//!
//! Soft state: the buffer and the pipeline's position exist only in this process. A
//! restarted worker gets its unfinished tasks back from the dispatcher and runs them
//! from the beginning (OFF, and its whole shard again in a static mode, as tf.data)
//! or on new splits (DYNAMIC).

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use sluice_proto::v1 as pb;
use tokio::sync::oneshot;

use crate::buffer::{StopReason, StopSignal, TaskBuffer};
use crate::cache::CrossTrainerCache;
use crate::coordinated::Rounds;
use crate::ordered::Ordered;
use crate::runner::RunnerContext;

/// Everything starting a task needs.
#[derive(Clone)]
pub(crate) struct TaskContext {
    pub runner: RunnerContext,
    /// For the task's span and the errors of user functions.
    pub worker_address: String,
    /// Elements buffered per task (a coordinated task buffers one round instead).
    pub buffer_elements: usize,
    /// Byte bound of each cross-trainer cache task's window.
    pub cross_trainer_cache_bytes: u64,
}

pub(crate) struct Task {
    pub task_id: u64,
    pub iteration_id: u64,
    /// The `job` label of this task's metrics: the job's name, or its id from a
    /// dispatcher that does not send names.
    pub job: Arc<str>,
    /// What the pipeline produced and no consumer has taken yet.
    pub buffer: TaskBuffer,
    stop: StopSignal,
    /// Fires when the pipeline thread returns; `None` once taken, or if the thread
    /// never started.
    pipeline_done: Mutex<Option<oneshot::Receiver<()>>>,
    /// The job's cross-trainer cache over this task's elements, if it uses one.
    pub cache: Option<CrossTrainerCache>,
    /// GetElements streams open on this task (a draining worker waits for them).
    pub open_streams: AtomicUsize,
    /// Coordinated reads: the task serves rounds (`coordinated.rs`), not streams.
    pub rounds: Option<Rounds>,
    /// A DYNAMIC task: what it holds was handed to this worker alone (its splits),
    /// so a draining worker keeps serving it until it has delivered them (`drain.rs`).
    pub dynamic: bool,
    /// A DYNAMIC exactly-once task: its streams carry the elements' positions.
    pub exactly_once: bool,
    /// Deterministic order: per-consumer queues of the task's splits (`ordered.rs`).
    pub ordered: Option<Ordered>,
}

impl Task {
    /// Creates the task and starts its pipeline thread. A task that cannot start
    /// (bad definition, unknown mode, no thread) is created failed, so its consumers
    /// get the reason instead of waiting.
    pub(crate) fn start(def: pb::TaskDef, ctx: &TaskContext) -> Arc<Task> {
        let task_id = def.task_id;
        // A coordinated task keeps at most one round (num_consumers elements) ahead.
        let capacity = def.num_consumers.map_or(ctx.buffer_elements, |n| n as usize);
        let worker = Arc::from(ctx.worker_address.as_str());
        let (tx, mut buffer) = crate::buffer::channel(task_id, worker, capacity);
        let stop = StopSignal::new();
        let span = tracing::info_span!(
            "task",
            worker = %ctx.worker_address,
            task_id,
            iteration_id = def.iteration_id,
            job_id = def.job_id,
        );
        let iteration_id = def.iteration_id;
        let job: Arc<str> = match def.job_name.as_str() {
            "" => Arc::from(def.job_id.to_string()),
            name => Arc::from(name),
        };
        let cache = def
            .use_cross_trainer_cache
            .then(|| CrossTrainerCache::new(task_id, ctx.cross_trainer_cache_bytes));
        let rounds = def.num_consumers.map(Rounds::new);
        let dynamic = def.mode == pb::ProcessingMode::Dynamic as i32;
        let exactly_once = dynamic && def.exactly_once;
        let consumers = def.deterministic_consumers.filter(|_| exactly_once);
        let too_many = consumers.filter(|n| *n == 0 || *n > crate::ordered::MAX_CONSUMERS);
        let ordered = consumers.filter(|_| too_many.is_none()).map(Ordered::new);
        let grants = ordered.as_ref().map(|o| o.grants.clone());
        let spawned = match too_many {
            Some(n) => Err(format!(
                "the task is read in a deterministic order by {n} consumers, outside 1..={}",
                crate::ordered::MAX_CONSUMERS
            )),
            None => crate::runner::spawn(def, &ctx.runner, span, stop.subscribe(), tx, grants),
        };
        let pipeline_done = match spawned {
            Ok(done) => Some(done),
            Err(message) => {
                tracing::warn!(task_id, %message, "task failed to start");
                buffer.fail_at_start(message);
                None
            }
        };
        let task = Arc::new(Task {
            task_id,
            iteration_id,
            job,
            buffer,
            stop,
            pipeline_done: Mutex::new(pipeline_done),
            cache,
            open_streams: AtomicUsize::new(0),
            rounds,
            dynamic,
            exactly_once,
            ordered,
        });
        if let Some(ordered) = &task.ordered {
            ordered.start(task.clone(), &ctx.runner.runtime);
        }
        task
    }

    /// Cuts the task's streams short and releases a pipeline thread waiting for a
    /// split. The first reason wins.
    pub(crate) fn stop(&self, reason: StopReason) {
        self.stop.stop(reason);
    }

    /// Why the task was stopped, if it was.
    pub(crate) fn stop_reason(&self) -> Option<StopReason> {
        self.stop.reason()
    }

    /// Resolves once [`Task::stop`] was called.
    pub(crate) async fn stopped(&self) -> StopReason {
        self.stop.stopped().await
    }

    /// The signal that the pipeline thread returned; `None` after the first call, or
    /// at once if the thread never started.
    pub(crate) fn take_pipeline_done(&self) -> Option<oneshot::Receiver<()>> {
        self.pipeline_done.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl crate::ordered::Source for Task {
    fn buffer(&self) -> &TaskBuffer {
        &self.buffer
    }

    fn stopped(&self) -> impl std::future::Future<Output = StopReason> + Send {
        self.stop.stopped()
    }
}
