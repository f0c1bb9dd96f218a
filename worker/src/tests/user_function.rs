//! A user function's failure reaches the reader as a status it can act on: reason
//! `UserFunction`, the failure as JSON in the details naming this worker, within
//! the bounds an HTTP/2 client takes in trailers. The Python process pool is
//! replaced by a fake executor whose every call raises (this tests the worker,
//! not the pool).

use std::sync::mpsc::Sender;
use std::sync::Arc;

use sluice_dataset::python::{PyCall, PyFunction, PyOp, PythonStage};
use sluice_dataset::{
    DatasetDef, FunctionRegistry, Phase, PyFailure, PyOutcome, PyReply, PythonExecutor, Stage,
    UserFunctionFailure,
};
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use tokio::net::TcpListener;
use tonic::Code;

use super::fixtures::{connect, open_stream, read_to_end, request};
use super::mock_dispatcher::{task_def, MockDispatcher};
use crate::user_error::{MAX_MESSAGE_BYTES, MAX_TRACEBACK_BYTES};
use crate::{spawn, WorkerConfig};

/// Every call raises `ValueError` with `traceback`.
struct Raising {
    traceback: String,
    message: String,
}

impl PythonExecutor for Raising {
    fn version(&self) -> &str {
        "3.11.7"
    }
    fn processes(&self) -> usize {
        1
    }
    fn prepare(&self, _: &Arc<PyFunction>, _: &str) -> Result<(), PyFailure> {
        Ok(())
    }
    fn submit(&self, call: PyCall, ticket: u64, reply: Sender<PyReply>) {
        let failure = PyFailure {
            error_type: "ValueError".into(),
            message: self.message.clone(),
            traceback: self.traceback.clone(),
        };
        let outcomes = call.inputs.iter().map(|_| PyOutcome::Failed(failure.clone())).collect();
        let _ = reply.send(PyReply { ticket, response: Ok(outcomes) });
    }
}

fn python_map() -> DatasetDef {
    let f = PyFunction::Ref("aug:flip".into());
    let mut def = DatasetDef::range(10);
    def.stages.push(Stage::Python(PythonStage::new(PyOp::Map, f, "3.11.7")));
    def
}

/// Reads task 1 (`python_map` failing with `executor`) to its error.
async fn failed_read(executor: Raising) -> (tonic::Status, String) {
    let task = task_def(1, &python_map(), pb::ProcessingMode::Off);
    let dispatcher = MockDispatcher::start(vec![task]).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind worker");
    let registry = FunctionRegistry::builtin().with_python(Arc::new(executor));
    let config = WorkerConfig::for_tests(vec![dispatcher.address()]);
    let worker = spawn(listener, config, registry).await.expect("spawn worker");
    let mut client = connect(&worker).await;
    let got = read_to_end(open_stream(&mut client, request(1, 0, 0)).await.expect("opens")).await;
    assert!(got.values.is_empty(), "the first element failed: {got:?}");
    let status = got.error.expect("the read ends with the user's error");
    let address = worker.address().to_string();
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
    (status, address)
}

#[tokio::test]
async fn a_raising_function_ends_the_read_with_its_failure_naming_this_worker() {
    let traceback = "Traceback (most recent call last):\n  File \"aug.py\", line 3, in flip\n    \
                     raise ValueError('bad pixel')\nValueError: bad pixel\n";
    let raising = Raising { traceback: traceback.into(), message: "bad pixel".into() };
    let (status, address) = failed_read(raising).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert_eq!(Reason::of(&status), Some(Reason::UserFunction), "{status:?}");
    let failure = UserFunctionFailure::from_details(status.details()).expect("JSON details");
    assert_eq!(failure.stage, "stages[1]");
    assert_eq!(failure.op, "map");
    assert_eq!(failure.function, "aug:flip");
    assert_eq!(failure.worker, address, "the worker names itself");
    assert_eq!(failure.phase, Phase::Call);
    assert_eq!(failure.failure.error_type, "ValueError");
    assert_eq!(failure.failure.traceback, traceback);
    // Other gRPC readers get the same in the message.
    let message = status.message();
    assert!(message.starts_with("task 1: pipeline failed: the Python map function"), "{message}");
    assert!(message.contains(&format!("failed on worker {address}: ValueError: bad pixel")));
    assert!(message.contains("raise ValueError('bad pixel')"), "{message}");
}

#[tokio::test]
async fn a_huge_traceback_and_message_are_cut_to_fit_the_trailers_keeping_the_last_frames() {
    let frames: String =
        (0..5000).map(|i| format!("  File \"deep.py\", line {i}, in f\n")).collect();
    let traceback = format!("Traceback (most recent call last):\n{frames}RecursionError: deep\n");
    let message = "x".repeat(100_000);
    let (status, _) = failed_read(Raising { traceback, message }).await;
    // Not a torn stream: the reader's HTTP/2 client took the trailers.
    assert_eq!(Reason::of(&status), Some(Reason::UserFunction), "{status:?}");
    let failure = UserFunctionFailure::from_details(status.details()).expect("JSON details");
    let kept = &failure.failure.traceback;
    assert!(kept.len() <= MAX_TRACEBACK_BYTES + 64, "{} bytes kept", kept.len());
    assert!(kept.starts_with("… (") && kept.contains("bytes of traceback cut)\n"), "{kept}");
    assert!(kept.ends_with("line 4999, in f\nRecursionError: deep\n"), "{kept}");
    let m = &failure.failure.message;
    assert!(m.len() <= MAX_MESSAGE_BYTES + 64 && m.ends_with("more bytes)"), "{m}");
}
