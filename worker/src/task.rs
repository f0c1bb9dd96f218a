//! One task: its pipeline thread and the bounded buffer its consumers take from.
//!
//! ```text
//!  pipeline thread ──blocking_send──▶ mpsc (task_buffer_elements) ──▶ Buffer ──▶ GetElements
//!  (DatasetDef::iter_*)                bounded: the pipeline waits    (Mutex)    streams, FCFS
//! ```
//!
//! The pipeline runs on its own `std::thread` because the executor is synchronous.
//! It stops when the receiver is dropped, i.e. when the last `Arc<Task>` goes (task
//! deleted or worker stopping, and every stream on it ended).
//!
//! Soft state: the buffer and the pipeline's position exist only in this process. A
//! restarted worker gets its unfinished tasks back from the dispatcher and runs them
//! from the beginning (OFF, and its whole shard again in a static mode, as tf.data)
//! or on new splits (DYNAMIC).

use std::sync::Arc;

use prost::Message;
use sluice_client::DispatcherClient;
use sluice_dataset::{DatasetDef, DatasetError, Element, FunctionRegistry, StaticPolicy};
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch, Mutex};
use tonic::Status;

use crate::config::WorkerConfig;
use crate::splits::RemoteSplitProvider;

/// The static sharding policy of a static mode; `None` for OFF and DYNAMIC.
fn static_policy(mode: pb::ProcessingMode) -> Option<StaticPolicy> {
    match mode {
        pb::ProcessingMode::File => Some(StaticPolicy::File),
        pb::ProcessingMode::Data => Some(StaticPolicy::Data),
        pb::ProcessingMode::FileOrData => Some(StaticPolicy::FileOrData),
        pb::ProcessingMode::Hint => Some(StaticPolicy::Hint),
        _ => None,
    }
}

/// Why a task's streams were cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// The dispatcher no longer wants the task run (`tasks_to_delete`).
    Deleted,
    ShuttingDown,
}

/// The answer for a task this worker has not heard of yet: retryable, and marked so
/// a coordinated reader knows the worker is alive.
pub(crate) fn not_yet_known(task_id: u64) -> Status {
    Reason::TaskNotYetKnown
        .attach(Status::unavailable(format!("task {task_id} is not known to this worker yet")))
}

impl StopReason {
    pub(crate) fn status(self, task_id: u64) -> Status {
        match self {
            StopReason::Deleted => Reason::TaskDeleted.attach(Status::failed_precondition(
                format!("task {task_id} was deleted by the dispatcher before it finished"),
            )),
            // Retryable: the same address may come back (a restarted worker).
            StopReason::ShuttingDown => Status::unavailable("the worker is shutting down"),
        }
    }
}

/// Everything a pipeline thread needs besides its task.
#[derive(Clone)]
pub(crate) struct RunnerContext {
    pub registry: FunctionRegistry,
    pub dispatcher: DispatcherClient,
    pub runtime: Handle,
    pub worker_uid: u64,
    pub worker_address: String,
    pub buffer_elements: usize,
    /// Splits asked for per GetSplit (one grant, one range).
    pub splits_per_request: u32,
    /// Byte bound of each cross-trainer cache task's window.
    pub cross_trainer_cache_bytes: u64,
    /// True once the worker drains: DYNAMIC sources take no new split.
    pub draining: watch::Receiver<bool>,
}

/// Per-message bounds of one GetElements stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_elements: usize,
    pub(crate) max_bytes: u64,
}

impl Limits {
    /// 0 in a request means "the worker's default"; a request may only lower it.
    pub(crate) fn new(config: &WorkerConfig, max_elements: u32, max_bytes: u64) -> Self {
        let lower = |asked: u64, own: u64| if asked == 0 { own } else { asked.min(own) };
        let elements = lower(u64::from(max_elements), u64::from(config.max_elements_per_message));
        Limits {
            max_elements: usize::try_from(elements).unwrap_or(usize::MAX).max(1),
            max_bytes: lower(max_bytes, config.max_bytes_per_message).max(1),
        }
    }

    /// Explicit bounds (each at least 1).
    pub(crate) fn bounded(max_elements: usize, max_bytes: u64) -> Self {
        Limits { max_elements: max_elements.max(1), max_bytes: max_bytes.max(1) }
    }
}

pub(crate) struct Task {
    pub task_id: u64,
    pub iteration_id: u64,
    pub job_id: u64,
    buffer: Mutex<Buffer>,
    stop: watch::Sender<Option<StopReason>>,
    /// Fires when the pipeline thread returns (or could not start).
    pipeline_done: std::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// The job's cross-trainer cache over this task's elements, if it uses one.
    pub cache: Option<crate::cache::CrossTrainerCache>,
    /// GetElements streams open on this task (a draining worker waits for them).
    pub open_streams: std::sync::atomic::AtomicUsize,
    /// Coordinated reads: the task serves rounds (`coordinated.rs`), not streams.
    pub rounds: Option<crate::coordinated::Rounds>,
}

struct Buffer {
    rx: mpsc::Receiver<Result<Element, DatasetError>>,
    /// An element taken from `rx` that did not fit the previous message's byte bound.
    carry: Option<pb::Element>,
    state: State,
}

enum State {
    Open,
    /// The pipeline ended and every element was taken.
    Ended,
    /// Sticky: every later request gets this error.
    Failed(String),
}

impl Task {
    /// Creates the task and starts its pipeline thread. A task that cannot start
    /// (bad definition, unknown mode, no thread) is created failed, so its consumers
    /// get the reason instead of waiting.
    pub(crate) fn start(def: pb::TaskDef, ctx: &RunnerContext) -> Arc<Task> {
        // A coordinated task keeps at most one round (num_consumers elements) ahead.
        let capacity = def.num_consumers.map_or(ctx.buffer_elements, |n| n as usize);
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (stop, _) = watch::channel(None);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let cache = def.use_cross_trainer_cache.then(|| {
            crate::cache::CrossTrainerCache::new(def.task_id, ctx.cross_trainer_cache_bytes)
        });
        let rounds = def.num_consumers.map(crate::coordinated::Rounds::new);
        let mut task = Task {
            task_id: def.task_id,
            iteration_id: def.iteration_id,
            job_id: def.job_id,
            pipeline_done: std::sync::Mutex::new(Some(done_rx)),
            buffer: Mutex::new(Buffer { rx, carry: None, state: State::Open }),
            stop,
            cache,
            open_streams: Default::default(),
            rounds,
        };
        let span = tracing::info_span!(
            "task",
            worker = %ctx.worker_address,
            task_id = task.task_id,
            iteration_id = task.iteration_id,
            job_id = task.job_id,
        );
        let started = Pipeline::from_def(def).and_then(|pipeline| {
            let ctx = ctx.clone();
            let stop = task.stop.subscribe();
            let task_id = task.task_id;
            std::thread::Builder::new()
                .name(format!("sluice-task-{task_id}"))
                .spawn(move || {
                    let _entered = span.enter();
                    pipeline.run(task_id, &ctx, stop, tx);
                    let _ = done_tx.send(());
                })
                .map(drop)
                .map_err(|e| format!("cannot start the pipeline thread: {e}"))
        });
        if let Err(message) = started {
            tracing::warn!(task_id = task.task_id, %message, "task failed to start");
            task.buffer.get_mut().state = State::Failed(message);
        }
        Arc::new(task)
    }

    /// Cuts the task's streams short and releases a pipeline thread waiting for a split.
    pub(crate) fn stop(&self, reason: StopReason) {
        // The first reason wins: a deleted task stays "deleted" when the worker then stops.
        self.stop.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(reason);
            }
            first
        });
    }

    /// Resolves once [`Task::stop`] was called.
    pub(crate) async fn stopped(&self) -> StopReason {
        let mut rx = self.stop.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.unwrap_or(StopReason::ShuttingDown),
            // Unreachable while `self` (which owns the sender) is borrowed.
            Err(_) => StopReason::ShuttingDown,
        };
        reason
    }

    /// Takes the next message's elements, first come first served: waits for one
    /// element, then adds those already buffered up to the bounds. The returned batch
    /// has `end_of_sequence` once the pipeline ended and the buffer is empty.
    ///
    /// Cancel-safe: the only awaits (the lock and the first `recv`) lose nothing if
    /// dropped; after the first element no await remains.
    pub(crate) async fn next_batch(&self, limits: Limits) -> Result<Batch, Status> {
        let mut buf = self.buffer.lock().await;
        let first = match buf.carry.take() {
            Some(element) => element,
            None => match &buf.state {
                State::Ended => return Ok(Batch { elements: Vec::new(), end_of_sequence: true }),
                State::Failed(message) => return Err(self.failure(message)),
                State::Open => match buf.rx.recv().await {
                    Some(Ok(element)) => pb::Element::from(element),
                    Some(Err(e)) => return Err(buf.fail(self, e)),
                    None => {
                        buf.state = State::Ended;
                        return Ok(Batch { elements: Vec::new(), end_of_sequence: true });
                    }
                },
            },
        };
        let mut bytes = framed_len(&first);
        let mut elements = vec![first];
        while elements.len() < limits.max_elements {
            match buf.rx.try_recv() {
                Ok(Ok(element)) => {
                    let element = pb::Element::from(element);
                    let len = framed_len(&element);
                    if bytes.saturating_add(len) > limits.max_bytes {
                        buf.carry = Some(element);
                        break;
                    }
                    bytes += len;
                    elements.push(element);
                }
                // Deliver what was taken; the next request gets the error.
                Ok(Err(e)) => {
                    buf.fail(self, e);
                    break;
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    buf.state = State::Ended;
                    return Ok(Batch { elements, end_of_sequence: true });
                }
            }
        }
        Ok(Batch { elements, end_of_sequence: false })
    }

    /// The signal that the pipeline thread returned (or could not start); `None`
    /// after the first call.
    pub(crate) fn take_pipeline_done(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        self.pipeline_done.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Once the pipeline thread returned: if every element it produced has been
    /// taken by a stream, marks the task ended and returns true. This finishes a
    /// task whose consumers are no longer reading it: e.g. a restarted worker whose
    /// task got no splits left while its consumers had already seen the end of
    /// sequence from the previous process. Without it such a task would never be
    /// reported finished, and its iteration would never end.
    pub(crate) async fn ended_when_drained(&self) -> bool {
        let mut buf = self.buffer.lock().await;
        if !matches!(buf.state, State::Open) || buf.carry.is_some() {
            return false;
        }
        match buf.rx.try_recv() {
            Err(mpsc::error::TryRecvError::Disconnected) => {
                buf.state = State::Ended;
                true
            }
            // Left for a stream, which will see the end after it.
            Ok(Ok(element)) => {
                buf.carry = Some(pb::Element::from(element));
                false
            }
            Ok(Err(e)) => {
                buf.fail(self, e);
                false
            }
            Err(mpsc::error::TryRecvError::Empty) => false,
        }
    }

    /// One element for a coordinated round, waiting at most `wait` for it.
    pub(crate) async fn take_one(&self, wait: std::time::Duration) -> Result<Took, Status> {
        let mut buf = self.buffer.lock().await;
        // Taken from the channel by `ended_when_drained`, not yet delivered.
        if let Some(element) = buf.carry.take() {
            return Ok(Took::Element(element));
        }
        match &buf.state {
            State::Ended => return Ok(Took::Ended),
            State::Failed(message) => return Err(self.failure(message)),
            State::Open => {}
        }
        match tokio::time::timeout(wait, buf.rx.recv()).await {
            Err(_) => Ok(Took::Nothing),
            Ok(Some(Ok(element))) => Ok(Took::Element(pb::Element::from(element))),
            Ok(Some(Err(e))) => Err(buf.fail(self, e)),
            Ok(None) => {
                buf.state = State::Ended;
                Ok(Took::Ended)
            }
        }
    }

    fn failure(&self, message: &str) -> Status {
        Status::internal(format!("task {}: pipeline failed: {message}", self.task_id))
    }
}

impl Buffer {
    fn fail(&mut self, task: &Task, error: DatasetError) -> Status {
        let message = error.to_string();
        tracing::warn!(task_id = task.task_id, %message, "pipeline failed");
        let status = task.failure(&message);
        self.state = State::Failed(message);
        status
    }
}

/// Bytes an element adds to an `ElementBatch`: its encoding plus field key and length.
fn framed_len(element: &pb::Element) -> u64 {
    let len = element.encoded_len();
    (1 + prost::length_delimiter_len(len) + len) as u64
}

/// What [`Task::take_one`] found.
pub(crate) enum Took {
    Element(pb::Element),
    /// Nothing within the wait.
    Nothing,
    /// The pipeline ended.
    Ended,
}

pub(crate) struct Batch {
    pub elements: Vec<pb::Element>,
    pub end_of_sequence: bool,
}

/// A task's dataset and how its source is read.
struct Pipeline {
    /// For a static mode, already this worker's shard.
    def: DatasetDef,
    mode: pb::ProcessingMode,
}

impl Pipeline {
    fn from_def(def: pb::TaskDef) -> Result<Pipeline, String> {
        let mode = pb::ProcessingMode::try_from(def.mode)
            .ok()
            .filter(|m| *m != pb::ProcessingMode::Unspecified)
            .ok_or_else(|| format!("unsupported processing mode {}", def.mode))?;
        // One source per pipeline, hence at most one split provider.
        if mode == pb::ProcessingMode::Dynamic && def.num_split_providers > 1 {
            return Err(format!(
                "the task needs {} split providers; this worker's pipelines have one source",
                def.num_split_providers
            ));
        }
        let wire = def.dataset.ok_or("the task definition has no dataset")?;
        let dataset = DatasetDef::try_from(wire).map_err(|e| e.to_string())?;
        let dataset = match static_policy(mode) {
            // Static sharding: this worker's shard of the pipeline (tf.data's
            // auto-shard rewrite), from its position in the dispatcher's list.
            Some(policy) => dataset
                .for_worker(policy, def.num_workers as usize, def.worker_index as usize)
                .map_err(|e| {
                    format!(
                        "{} sharding as worker {} of {}: {e}",
                        policy.name(),
                        def.worker_index,
                        def.num_workers
                    )
                })?,
            None => dataset,
        };
        Ok(Pipeline { def: dataset, mode })
    }

    /// Splits to ask for per GetSplit. A split of a file source is a whole file:
    /// granting several at once would leave one worker with many files while the
    /// others run dry, so file sources take one per request.
    fn splits_per_request(&self, configured: u32) -> u32 {
        match self.def.stages.first() {
            Some(stage) if stage.is_file_source() => 1,
            _ => configured,
        }
    }

    /// The body of the pipeline thread.
    fn run(
        self,
        task_id: u64,
        ctx: &RunnerContext,
        stop: watch::Receiver<Option<StopReason>>,
        tx: mpsc::Sender<Result<Element, DatasetError>>,
    ) {
        tracing::info!(mode = ?self.mode, "pipeline started");
        let iter = match self.mode {
            pb::ProcessingMode::Dynamic => {
                let splits = RemoteSplitProvider::new(
                    ctx.dispatcher.clone(),
                    ctx.runtime.clone(),
                    stop,
                    task_id,
                    ctx.worker_uid,
                    0,
                    self.splits_per_request(ctx.splits_per_request),
                )
                .draining(ctx.draining.clone());
                self.def.iter_with_splits(&ctx.registry, Box::new(splits))
            }
            _ => self.def.iter_local(&ctx.registry),
        };
        let iter = match iter {
            Ok(iter) => iter,
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        for item in iter {
            let failed = item.is_err();
            if tx.blocking_send(item).is_err() {
                tracing::info!("pipeline stopped: the task was dropped");
                return;
            }
            if failed {
                return;
            }
        }
        // Dropping `tx` tells the consumers: end of sequence.
        tracing::info!("pipeline reached end of sequence");
    }
}
