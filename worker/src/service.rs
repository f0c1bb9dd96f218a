//! The Worker gRPC service: `GetElements` streams a task's elements.
//!
//! Each stream has a producer (a tokio task) that takes batches from the task's
//! buffer and a bounded response channel (capacity 2) read by tonic. The producer
//! reserves room in the channel *before* taking a batch, so a slow consumer leaves
//! elements in the task buffer for faster ones instead of holding them. It stops
//! when the client goes away, the task is stopped, or the sequence ends.

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use sluice_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::state::{Lookup, Worker};
use crate::task::{Batch, Limits, StopReason, Task};

/// Batches a stream may have produced and the client not yet read.
const RESPONSE_BUFFER: usize = 2;

/// How long a stopped stream waits for room to tell its client why. Bounded so a
/// client that stopped reading does not keep the task (and its thread) alive.
const STOP_NOTICE_TIMEOUT: Duration = Duration::from_secs(5);

type BatchResult = Result<pb::ElementBatch, Status>;

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
        request: Request<pb::GetElementsRequest>,
    ) -> Result<Response<Self::GetElementsStream>, Status> {
        let req = request.into_inner();
        let task_id = req.task_id;
        let task = match self.worker.lookup(task_id) {
            Lookup::Running(task) => task,
            Lookup::Finished => return Ok(Response::new(end_of_sequence_stream())),
            Lookup::Deleted => return Err(StopReason::Deleted.status(task_id)),
            Lookup::ShuttingDown => return Err(StopReason::ShuttingDown.status(task_id)),
            Lookup::Unknown => {
                return Err(Status::unavailable(format!(
                    "task {task_id} is not known to this worker yet"
                )))
            }
        };
        if task.rounds.is_some() {
            return Err(Status::failed_precondition(format!(
                "task {task_id} serves coordinated reads (num_consumers is set); read it with \
                 RoundRobinGetElement, one round at a time"
            )));
        }
        crate::cache::check_request(&task, &req.trainer_id)?;
        let trainer = Some(req.trainer_id).filter(|t| !t.is_empty());
        let limits = Limits::new(
            &self.worker.config,
            req.max_elements_per_message,
            req.max_bytes_per_message,
        );
        let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
        let span = tracing::debug_span!(
            "get_elements",
            worker = %self.worker.address,
            task_id,
            iteration_id = task.iteration_id,
            client_id = req.client_id,
        );
        tokio::spawn(produce(self.worker.clone(), task, trainer, limits, tx).instrument(span));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn round_robin_get_element(
        &self,
        request: Request<pb::RoundRobinGetElementRequest>,
    ) -> Result<Response<pb::RoundRobinGetElementResponse>, Status> {
        let answer = crate::round_robin::get_element(&self.worker, request.into_inner()).await?;
        if let Some(e) = &answer.element {
            self.worker.counters.streamed(1, e.encoded_len());
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

/// The next message of a stream: from the task's cross-trainer cache at the
/// trainer's cursor, or first come first served from its buffer.
async fn next_batch(task: &Task, trainer: Option<&str>, limits: Limits) -> Result<Batch, Status> {
    match (&task.cache, trainer) {
        (Some(cache), Some(trainer)) => {
            let elements = cache.next_batch(task, trainer, limits).await?;
            Ok(Batch { elements, end_of_sequence: false })
        }
        _ => task.next_batch(limits).await,
    }
}

/// The answer for a task that already finished: one empty end_of_sequence batch.
fn end_of_sequence_stream() -> ReceiverStream<BatchResult> {
    let (tx, rx) = mpsc::channel(1);
    // Cannot fail: the channel is new, has room for one and its receiver is alive.
    let _ = tx.try_send(Ok(pb::ElementBatch { elements: Vec::new(), end_of_sequence: true }));
    ReceiverStream::new(rx)
}

async fn produce(
    worker: Arc<Worker>,
    task: Arc<Task>,
    trainer: Option<String>,
    limits: Limits,
    tx: mpsc::Sender<BatchResult>,
) {
    let _open = crate::drain::OpenStream::new(&task);
    let _counted = worker.counters.stream_opened();
    let mut sent = 0u64;
    loop {
        let permit = tokio::select! {
            permit = tx.reserve() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // the client went away
            },
            reason = task.stopped() => {
                tracing::debug!(sent, ?reason, "stream stopped");
                // Batches already queued go first; a client that stopped reading
                // altogether sees the stream end without end_of_sequence instead.
                let notice = tx.send(Err(reason.status(task.task_id)));
                let _ = tokio::time::timeout(STOP_NOTICE_TIMEOUT, notice).await;
                return;
            }
        };
        let batch = tokio::select! {
            batch = next_batch(&task, trainer.as_deref(), limits) => batch,
            reason = task.stopped() => Err(reason.status(task.task_id)),
            _ = tx.closed() => break,
        };
        match batch {
            Ok(batch) => {
                let end = batch.end_of_sequence;
                sent += batch.elements.len() as u64;
                if end {
                    // The first stream to see the end finishes the task for everyone.
                    worker.finish(&task);
                }
                let message = pb::ElementBatch { elements: batch.elements, end_of_sequence: end };
                worker.counters.streamed(message.elements.len(), message.encoded_len());
                permit.send(Ok(message));
                if end {
                    tracing::debug!(sent, "stream reached end of sequence");
                    return;
                }
            }
            Err(status) => {
                tracing::debug!(sent, code = ?status.code(), "stream failed");
                permit.send(Err(status));
                return;
            }
        }
    }
    tracing::debug!(sent, "stream closed by the client");
}
