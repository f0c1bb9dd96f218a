//! The Worker gRPC service: `GetElements` streams a task's elements.
//!
//! [`open_stream`] checks a GetElements request and starts its producer
//! (`producer`), which feeds a bounded channel of messages. The server answers
//! GetElements through `route`, which encodes those messages without copying
//! tensor data; the generated tonic method below reads the same channel (it is
//! what a plain `WorkerServer` would serve) and the other methods are served by
//! the generated `WorkerServer` as usual.

use std::sync::Arc;

use prost::Message;
use sluice_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::producer::{produce, BatchResult, RESPONSE_BUFFER};
use crate::state::{Lookup, Worker};
use crate::task::{Limits, StopReason};

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
        let rx = open_stream(&self.worker, request.into_inner())?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn coordinated_get_element(
        &self,
        request: Request<pb::CoordinatedGetElementRequest>,
    ) -> Result<Response<pb::CoordinatedGetElementResponse>, Status> {
        let answer = crate::coordinated::get_element(&self.worker, request.into_inner()).await?;
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

/// Starts a GetElements stream: checks the request against the task table and
/// spawns the stream's producer in a span carrying its ids. The receiver yields the
/// stream's messages, then its end: closed after end_of_sequence, or an error.
pub(crate) fn open_stream(
    worker: &Arc<Worker>,
    req: pb::GetElementsRequest,
) -> Result<mpsc::Receiver<BatchResult>, Status> {
    let task_id = req.task_id;
    let task = match worker.lookup(task_id) {
        Lookup::Running(task) => task,
        Lookup::Finished => return Ok(crate::producer::end_of_sequence()),
        Lookup::Deleted => return Err(StopReason::Deleted.status(task_id)),
        Lookup::ShuttingDown => return Err(StopReason::ShuttingDown.status(task_id)),
        Lookup::Unknown => return Err(crate::task::not_yet_known(task_id)),
    };
    if task.rounds.is_some() {
        return Err(Status::failed_precondition(format!(
            "task {task_id} serves coordinated reads (num_consumers is set); read it with \
             CoordinatedGetElement, one round at a time"
        )));
    }
    crate::cache::check_request(&task, &req.trainer_id)?;
    let trainer = Some(req.trainer_id).filter(|t| !t.is_empty());
    let limits =
        Limits::new(&worker.config, req.max_elements_per_message, req.max_bytes_per_message);
    let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
    let span = tracing::debug_span!(
        "get_elements",
        worker = %worker.address,
        task_id,
        iteration_id = task.iteration_id,
        client_id = req.client_id,
    );
    tokio::spawn(produce(worker.clone(), task, trainer, limits, tx).instrument(span));
    Ok(rx)
}
