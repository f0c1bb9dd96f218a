//! Starting a worker against a mock dispatcher, and reading its streams.

use std::time::Duration;

use sluice_dataset::{Element, FunctionRegistry};
use sluice_proto::v1 as pb;
use sluice_proto::v1::worker_client::WorkerClient;
use tokio::net::TcpListener;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use super::mock_dispatcher::{MockDispatcher, WAIT};
use crate::{spawn, WorkerConfig, WorkerHandle};

pub(crate) async fn start_worker(dispatcher: &MockDispatcher) -> WorkerHandle {
    start_worker_with(WorkerConfig::for_tests(vec![dispatcher.address()])).await
}

pub(crate) async fn start_worker_with(config: WorkerConfig) -> WorkerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind worker");
    spawn(listener, config, FunctionRegistry::builtin()).await.expect("spawn worker")
}

pub(crate) async fn connect(worker: &WorkerHandle) -> WorkerClient<Channel> {
    WorkerClient::connect(format!("http://{}", worker.address())).await.expect("connect to worker")
}

pub(crate) fn request(task_id: u64, max_elements: u32, max_bytes: u64) -> pb::GetElementsRequest {
    pb::GetElementsRequest {
        task_id,
        client_id: 1,
        max_elements_per_message: max_elements,
        max_bytes_per_message: max_bytes,
        trainer_id: String::new(),
        compression: 0,
        consumer_index: None,
        credit_elements: 0,
    }
}

/// Opens a stream, retrying Unavailable the way a client does: the worker learns its
/// tasks from the dispatcher in the background.
pub(crate) async fn open_stream(
    client: &mut WorkerClient<Channel>,
    req: pb::GetElementsRequest,
) -> Result<Streaming<pb::ElementBatch>, Status> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match client.get_elements(tokio_stream::once(req.clone())).await {
            Err(s) if s.code() == Code::Unavailable && tokio::time::Instant::now() < deadline => {
                // Client-style retry pacing, not synchronisation: the outcome does not
                // depend on how long this waits.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other.map(tonic::Response::into_inner),
        }
    }
}

/// What one stream delivered.
#[derive(Debug, Default)]
pub(crate) struct Received {
    pub values: Vec<i64>,
    pub batch_sizes: Vec<usize>,
    pub end_of_sequence: bool,
    /// Set when the stream failed.
    pub error: Option<Status>,
}

/// Reads a stream to its end (end_of_sequence, error, or close).
pub(crate) async fn read_to_end(mut stream: Streaming<pb::ElementBatch>) -> Received {
    let mut received = Received::default();
    loop {
        match stream.message().await {
            Ok(Some(batch)) => {
                assert!(!received.end_of_sequence, "a batch arrived after end_of_sequence");
                received.batch_sizes.push(batch.elements.len());
                received.values.extend(batch.elements.into_iter().map(int_value));
                received.end_of_sequence = batch.end_of_sequence;
            }
            Ok(None) => return received,
            Err(status) => {
                received.error = Some(status);
                return received;
            }
        }
    }
}

pub(crate) fn int_value(element: pb::Element) -> i64 {
    Element::try_from(element).and_then(|e| e.as_i64()).expect("an int64 scalar element")
}

/// `message` with gRPC's length prefix (uncompressed), as a request body carries it.
pub(crate) fn grpc_frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(&u32::try_from(message.len()).expect("fits").to_be_bytes());
    out.extend_from_slice(message);
    out
}
