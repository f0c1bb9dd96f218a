//! The Worker gRPC service: `GetElements` streams a task's elements,
//! `CoordinatedGetElement` serves one consumer's element of a round, `CacheStatus`
//! shows the cross-trainer caches.
//!
//! [`open_stream`] checks a GetElements request and starts its producer
//! (`producer`), which feeds a bounded channel of messages. The server answers
//! GetElements through `route`, which encodes those messages without copying
//! tensor data; the generated tonic method below reads the same channel (it is
//! what a plain `WorkerServer` would serve) and the other methods are served by
//! the generated `WorkerServer` as usual.
//!
//! Task lookups happen here, once per request ([`find`]): a task that was deleted,
//! is stopping with the worker, or is not known yet gets the same status from
//! every method, and the modules behind the service (`producer`, `coordinated`)
//! are handed the running task.

use std::future::Future;
use std::sync::Arc;

use prost::Message;
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::buffer::{Limits, StopReason};
use crate::compress::StreamCompression;
use crate::config::WorkerConfig;
use crate::credit::{Credit, Grants};
use crate::producer::{produce, BatchResult, Reader, RESPONSE_BUFFER};
use crate::state::{Lookup, Worker};
use crate::task::Task;

pub(crate) struct WorkerService {
    worker: Arc<Worker>,
}

impl WorkerService {
    pub(crate) fn new(worker: Arc<Worker>) -> Self {
        WorkerService { worker }
    }
}

#[tonic::async_trait]
impl pb::worker_server::Worker for WorkerService {
    type GetElementsStream = ReceiverStream<BatchResult>;

    async fn get_elements(
        &self,
        request: Request<Streaming<pb::GetElementsRequest>>,
    ) -> Result<Response<Self::GetElementsStream>, Status> {
        let mut requests = request.into_inner();
        let first = requests
            .message()
            .await?
            .ok_or_else(|| Status::internal("GetElements request has no message"))?;
        let rx = open_stream(&self.worker, first, |grants| grants.feed(requests))?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn coordinated_get_element(
        &self,
        request: Request<pb::CoordinatedGetElementRequest>,
    ) -> Result<Response<pb::CoordinatedGetElementResponse>, Status> {
        let req = request.into_inner();
        let task_id = req.task_id;
        let task = match find(&self.worker, task_id)? {
            Found::Running(task) => task,
            Found::Finished => {
                return Err(Status::failed_precondition(format!("task {task_id} has finished")))
            }
        };
        let Some(rounds) = &task.rounds else {
            return Err(Status::failed_precondition(format!(
                "task {task_id} is not a coordinated read (its job has no num_consumers); read \
                 it with GetElements"
            )));
        };
        let answer = rounds.get_element(&task.buffer, task.stopped(), &req).await?;
        if let Some(e) = &answer.element {
            self.worker.counters.for_job(&task.job).streamed(1, e.encoded_len());
        }
        Ok(Response::new(answer))
    }

    async fn cache_status(
        &self,
        _request: Request<pb::CacheStatusRequest>,
    ) -> Result<Response<pb::CacheStatusResponse>, Status> {
        let (running, _, _) = self.worker.activity();
        let mut tasks: Vec<pb::CacheTaskStatus> =
            running.iter().filter_map(|t| t.cache.as_ref().map(|c| c.status())).collect();
        tasks.sort_by_key(|t| t.task_id);
        Ok(Response::new(pb::CacheStatusResponse { tasks }))
    }
}

/// Starts a GetElements stream: checks the request against the task table and
/// spawns the stream's producer in a span carrying its ids. The receiver yields the
/// stream's messages, then its end: closed after end_of_sequence, or an error.
///
/// `feed` reads the rest of the request's messages into the stream's credit
/// (`credit`), when the first asked for credit.
pub(crate) fn open_stream<F, Fut>(
    worker: &Arc<Worker>,
    req: pb::GetElementsRequest,
    feed: F,
) -> Result<mpsc::Receiver<BatchResult>, Status>
where
    F: FnOnce(Grants) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let task_id = req.task_id;
    let task = match find(worker, task_id)? {
        Found::Running(task) => task,
        Found::Finished => return Ok(crate::producer::end_of_sequence(worker.clone(), task_id)),
    };
    if task.rounds.is_some() {
        return Err(Status::failed_precondition(format!(
            "task {task_id} serves coordinated reads (num_consumers is set); read it with \
             CoordinatedGetElement, one round at a time"
        )));
    }
    check_trainer(&task, &req.trainer_id)?;
    let reader = reader(&task, req.trainer_id, req.consumer_index)?;
    let limits =
        message_limits(&worker.config, req.max_elements_per_message, req.max_bytes_per_message);
    let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    let span = tracing::debug_span!(
        "get_elements",
        worker = %worker.address,
        task_id,
        iteration_id = task.iteration_id,
        client_id = req.client_id,
    );
    let compression = StreamCompression::for_request(req.compression);
    let credit = match reader {
        Reader::Consumer(_) => Credit::unbounded(),
        _ => Credit::start(req.credit_elements, feed),
    };
    let stream = produce(worker.clone(), task, reader, limits, compression, credit, tx);
    tokio::spawn(stream.instrument(span));
    Ok(rx)
}

/// What a request found under its task id, once the answers every method gives
/// alike are out of the way.
enum Found {
    Running(Arc<Task>),
    /// GetElements answers end of sequence; CoordinatedGetElement refuses.
    Finished,
}

/// Looks `task_id` up in the task table. A deleted task, a worker shutting down
/// and a task not known yet get their status here, the same for every method.
fn find(worker: &Worker, task_id: u64) -> Result<Found, Status> {
    match worker.lookup(task_id) {
        Lookup::Running(task) => Ok(Found::Running(task)),
        Lookup::Finished => Ok(Found::Finished),
        Lookup::Deleted => Err(StopReason::Deleted.status(task_id)),
        Lookup::ShuttingDown => Err(StopReason::ShuttingDown.status(task_id)),
        Lookup::Unknown => Err(not_yet_known(task_id)),
    }
}

/// The answer for a task this worker has not heard of yet: retryable, and marked
/// ([`Reason::TaskNotYetKnown`]) so a coordinated reader knows the worker is alive.
fn not_yet_known(task_id: u64) -> Status {
    Reason::TaskNotYetKnown
        .attach(Status::unavailable(format!("task {task_id} is not known to this worker yet")))
}

/// A stream's message bounds: the worker's, lowered by the request's (0 in a
/// request means "the worker's own"; a request may only lower them).
pub(crate) fn message_limits(config: &WorkerConfig, max_elements: u32, max_bytes: u64) -> Limits {
    let own = usize::try_from(config.max_elements_per_message).unwrap_or(usize::MAX);
    Limits::bounded(own, config.max_bytes_per_message).lowered_to(max_elements, max_bytes)
}

/// Who a checked request reads for: a deterministic-order task needs a
/// consumer index below its number of consumers, and only such a task takes one.
fn reader(task: &Task, trainer_id: String, consumer: Option<u32>) -> Result<Reader, Status> {
    let id = task.task_id;
    match (&task.ordered, consumer) {
        (Some(o), Some(i)) if i < o.consumers() => Ok(Reader::Consumer(i)),
        (Some(o), Some(i)) => Err(Status::invalid_argument(format!(
            "task {id}: consumer_index {i} is not below the job's {} consumers \
             (ReadOptions::deterministic: consumer_index < num_consumers)",
            o.consumers()
        ))),
        (Some(o), None) => Err(Status::failed_precondition(format!(
            "task {id} belongs to a job read in a deterministic order by {} consumers; \
             requests need a consumer_index (ReadOptions::deterministic)",
            o.consumers()
        ))),
        (None, Some(i)) => Err(Status::invalid_argument(format!(
            "task {id} is not read in a deterministic order, but the request names \
             consumer_index {i}; create the job with a deterministic order"
        ))),
        (None, None) if trainer_id.is_empty() => Ok(Reader::Any),
        (None, None) => Ok(Reader::Trainer(trainer_id)),
    }
}

/// Checks that a GetElements request matches its task's kind: a cache task needs a
/// trainer id, and only a cache task takes one.
fn check_trainer(task: &Task, trainer_id: &str) -> Result<(), Status> {
    match (&task.cache, trainer_id.is_empty()) {
        (Some(_), true) => Err(Status::invalid_argument(format!(
            "task {} belongs to a cross-trainer cache job; requests need a trainer_id \
             (ReadOptions::cross_trainer_cache)",
            task.task_id
        ))),
        (None, false) => Err(Status::invalid_argument(format!(
            "task {} does not use the cross-trainer cache, but the request names trainer \
             `{trainer_id}`; create the job with use_cross_trainer_cache",
            task.task_id
        ))),
        _ => Ok(()),
    }
}
