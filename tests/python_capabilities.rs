//! Capabilities over a real `sluice dispatcher` process (issue 15, "Capabilities"):
//! workers register the Python version they run Python stages with (none: no
//! Python stages); a job whose pipeline no registered worker can run is refused at
//! creation, naming the stage and what each worker runs; `sluice status` shows
//! each worker's Python and the elements its `ignore_errors` stages skipped.
//!
//! The workers are the test itself speaking the worker protocol (RegisterWorker,
//! WorkerHeartbeat), so a worker's Python version needs no Python installed.

mod common;

use sluice_client::{
    Client, ClientError, DispatcherClient, ProcessingMode, ReadOptions, RetryPolicy,
};
use sluice_dataset::python::{Pickled, PyFunction, PyOp, PythonStage};
use sluice_dataset::{DatasetDef, Stage};
use sluice_proto::v1 as pb;
use tonic::Code;

/// `range(10)` then a Python map of a lambda pickled by Python `version`.
fn pickled_map(version: &str) -> DatasetDef {
    let f = PyFunction::Pickle(Pickled { name: "<lambda>".into(), data: b"not run".to_vec() });
    let mut def = DatasetDef::range(10);
    def.stages.push(Stage::Python(PythonStage::new(PyOp::Map, f, version)));
    def
}

async fn register_worker(d: &DispatcherClient, address: &str, uid: u64, python: &str) {
    let req = pb::RegisterWorkerRequest {
        address: address.into(),
        worker_uid: uid,
        functions: vec![],
        python_version: python.into(),
    };
    d.register_worker(req).await.expect("the worker registers");
}

/// The refusal a call ended with: its code and message.
fn refusal<T>(r: Result<T, ClientError>) -> (Code, String) {
    match r {
        Err(ClientError::Rpc { code, message, .. }) => (code, message),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the call succeeded"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_no_registered_worker_can_run_is_refused_naming_the_stage_and_the_workers() {
    common::init_tracing();
    let d = common::server(&["dispatcher", "--port", "0"]);
    let client = Client::new(&[d.address().to_string()], RetryPolicy::for_tests()).unwrap();
    let dispatcher = client.dispatcher();

    tracing::info!("--- a Python 3.11 worker and a worker without Python register");
    register_worker(dispatcher, "127.0.0.1:5051", 1, "3.11.7").await;
    register_worker(dispatcher, "127.0.0.1:5052", 2, "").await;
    let needs_312 = client.register_dataset(&pickled_map("3.12.1"), None).await.unwrap();

    tracing::info!("--- a job over a pipeline pickled by Python 3.12: refused at creation");
    let read = ReadOptions::new(ProcessingMode::Dynamic).job_name("train");
    let (code, message) = refusal(client.from_dataset_id(&needs_312, read.clone()).await);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    let expected = "stages[1] (python map `<lambda>`, pickled with Python 3.12.1) cannot run on \
                    any worker: 127.0.0.1:5051 runs Python 3.11.7, 127.0.0.1:5052 runs no \
                    Python stages (start workers with --allow-python and Python 3.12, or ship \
                    the function by reference";
    assert!(message.contains(expected), "{message}");
    assert!(message.contains(&format!("dataset `{needs_312}`")), "{message}");
    let status = client.status().await.unwrap();
    assert!(status.jobs.is_empty(), "the refused job was not made: {status:?}");

    tracing::info!("--- the same workers run a pipeline without Python stages");
    let plain = client.register_dataset(&DatasetDef::range(10), None).await.unwrap();
    let job = pb::GetOrCreateJobRequest {
        dataset_id: plain,
        mode: pb::ProcessingMode::Off as i32,
        ..Default::default()
    };
    dispatcher.get_or_create_job(job).await.expect("a plain job is made");

    tracing::info!("--- two pickle versions in one pipeline: refused at registration");
    let mut both = pickled_map("3.11.7");
    both.stages.extend(pickled_map("3.12.1").stages.into_iter().skip(1));
    let (code, message) = refusal(client.register_dataset(&both, None).await);
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.contains("no worker can run both"), "{message}");
    assert!(message.contains("stages[1]") && message.contains("stages[2]"), "{message}");

    tracing::info!("--- a Python 3.12 worker registers: the job is made, its task is there");
    register_worker(dispatcher, "127.0.0.1:5053", 3, "3.12.4").await;
    let job = pb::GetOrCreateJobRequest {
        dataset_id: needs_312,
        mode: pb::ProcessingMode::Dynamic as i32,
        job_name: "train".into(),
        ..Default::default()
    };
    let job_id = dispatcher.get_or_create_job(job).await.expect("now a worker can").job_id;
    let it = pb::GetOrCreateIterationRequest { job_id, repetition: 0, ..Default::default() };
    dispatcher.get_or_create_iteration(it).await.unwrap();
    let heartbeat = |address: &str, uid, errors_ignored| pb::WorkerHeartbeatRequest {
        address: address.into(),
        worker_uid: uid,
        errors_ignored,
        ..Default::default()
    };
    let tasks = dispatcher.worker_heartbeat(heartbeat("127.0.0.1:5053", 3, 4)).await.unwrap();
    assert_eq!(tasks.new_tasks.len(), 1, "the Python 3.12 worker runs the job");
    for (address, uid) in [("127.0.0.1:5051", 1), ("127.0.0.1:5052", 2)] {
        let tasks = dispatcher.worker_heartbeat(heartbeat(address, uid, 0)).await.unwrap();
        assert!(tasks.new_tasks.is_empty(), "{address} cannot run it: {tasks:?}");
    }

    tracing::info!("--- status: each worker's Python and the elements ignore_errors skipped");
    let status = common::leader_status(&client).await;
    let worker = |a: &str| status.workers.iter().find(|w| w.address == a).unwrap().clone();
    assert_eq!(worker("127.0.0.1:5051").python_version.as_deref(), Some("3.11.7"));
    assert_eq!(worker("127.0.0.1:5052").python_version, None);
    assert_eq!(worker("127.0.0.1:5053").errors_ignored, Some(4));
    assert_eq!(worker("127.0.0.1:5052").errors_ignored, Some(0));
    let (ok, stdout, stderr) = common::run_sluice(&["status", "--dispatcher", d.address()], None);
    assert!(ok, "{stderr}");
    let line = |a: &str| stdout.lines().find(|l| l.contains(a)).unwrap_or_default().to_string();
    assert!(stdout.contains("PYTHON") && stdout.contains("ERRORS IGNORED"), "{stdout}");
    // The last two columns: PYTHON and ERRORS IGNORED.
    let last_two = |a: &str| {
        let words: Vec<String> = line(a).split_whitespace().map(String::from).collect();
        words[words.len().saturating_sub(2)..].to_vec()
    };
    assert_eq!(last_two("127.0.0.1:5051"), ["3.11.7", "0"], "{stdout}");
    assert_eq!(last_two("127.0.0.1:5052"), ["-", "0"], "{stdout}");
    assert_eq!(last_two("127.0.0.1:5053"), ["3.12.4", "4"], "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_worker_registers_its_pools_python_and_is_named_when_it_cannot_load_a_pickle() {
    common::init_tracing();
    let d = common::server(&["dispatcher", "--port", "0"]);
    let python = sluice_testkit::python::interpreter().display().to_string();
    let args = ["worker", "--dispatcher", d.address(), "--port", "0", "--allow-python"];
    let worker =
        common::server(&[&args[..], &["--python", &python, "--python-processes", "1"]].concat());
    let client = Client::new(&[d.address().to_string()], RetryPolicy::for_tests()).unwrap();
    let status = loop_status_until_workers(&client, 1).await;
    let version = status.workers[0].python_version.clone().expect("a Python version");
    let (major, minor) = sluice_dataset::python::parse_version(&version).expect("MAJOR.MINOR");

    tracing::info!("--- a function pickled by another minor version: refused, naming the worker");
    let other = format!("{major}.{}.0", minor + 1);
    let ds = client.register_dataset(&pickled_map(&other), None).await.unwrap();
    let read = ReadOptions::new(ProcessingMode::Off);
    let (code, message) = refusal(client.from_dataset_id(&ds, read).await);
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    let runs = format!("{} runs Python {version}", worker.address());
    assert!(message.contains(&runs), "{message}");
    assert!(message.contains(&format!("and Python {major}.{}", minor + 1)), "{message}");
}

/// Status from the leader once `n` workers registered.
async fn loop_status_until_workers(client: &Client, n: usize) -> sluice_client::ServiceStatus {
    let c = client.clone();
    common::wait_until("the workers registered", || {
        let c = c.clone();
        async move { c.status().await.is_ok_and(|s| s.workers.len() == n) }
    })
    .await;
    common::leader_status(client).await
}
