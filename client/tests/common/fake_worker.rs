//! A fake worker for the client's tests: serves each task's given messages
//! over a real gRPC stream on loopback, then ends the call.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use sluice_dataset::{Element, Tensor};
use sluice_positions::wire::join_positions;
use sluice_positions::Origin;
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use sluice_proto::v1::worker_server::{Worker, WorkerServer};
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone)]
struct FakeWorker {
    batches: Arc<HashMap<u64, Vec<pb::ElementBatch>>>,
    /// Tasks answered as deleted by the dispatcher (`Reason::TaskDeleted`).
    deleted: Arc<HashSet<u64>>,
}

type Batches = Pin<Box<dyn Stream<Item = Result<pb::ElementBatch, Status>> + Send>>;

#[tonic::async_trait]
impl Worker for FakeWorker {
    type GetElementsStream = Batches;

    async fn get_elements(
        &self,
        req: Request<Streaming<pb::GetElementsRequest>>,
    ) -> Result<Response<Batches>, Status> {
        // The first message names the task; credit is not kept (all is sent).
        let first = req.into_inner().message().await?;
        let task = first.ok_or_else(|| Status::internal("no request message"))?.task_id;
        if self.deleted.contains(&task) {
            let status = Status::failed_precondition(format!("task {task} was deleted"));
            return Err(Reason::TaskDeleted.attach(status));
        }
        let batches = self
            .batches
            .get(&task)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no task {task}")))?;
        Ok(Response::new(Box::pin(futures::stream::iter(batches.into_iter().map(Ok)))))
    }

    async fn cache_status(
        &self,
        _: Request<pb::CacheStatusRequest>,
    ) -> Result<Response<pb::CacheStatusResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }

    async fn coordinated_get_element(
        &self,
        _: Request<pb::CoordinatedGetElementRequest>,
    ) -> Result<Response<pb::CoordinatedGetElementResponse>, Status> {
        Err(Status::unimplemented("not in this fake"))
    }
}

/// Serves `batches` (task id → its messages) for the test's lifetime; the address.
pub async fn serve(batches: HashMap<u64, Vec<pb::ElementBatch>>) -> String {
    serve_deleting(batches, HashSet::new()).await
}

/// As [`serve`], answering GetElements of the `deleted` tasks as a worker does
/// once the dispatcher ended them.
pub async fn serve_deleting(
    batches: HashMap<u64, Vec<pb::ElementBatch>>,
    deleted: HashSet<u64>,
) -> String {
    let (incoming, address) = super::listen().await;
    let worker = FakeWorker { batches: Arc::new(batches), deleted: Arc::new(deleted) };
    let server = tonic::transport::Server::builder().add_service(WorkerServer::new(worker));
    tokio::spawn(server.serve_with_incoming(incoming));
    address
}

/// A message of one int64 element per unit (record 0 of each), with the
/// message's own origin `own`, as an exactly-once worker tags it.
pub fn message(units: &[u64], own: Origin, end: bool) -> pb::ElementBatch {
    let elements = units
        .iter()
        .map(|u| pb::Element::from(Element::new(vec![Tensor::scalar_i64(*u as i64)])))
        .collect();
    let positions = join_positions(units.iter().map(|u| Origin::record(*u, 0)), own);
    pb::ElementBatch {
        elements,
        end_of_sequence: end,
        positions: Some(positions),
        ..Default::default()
    }
}
