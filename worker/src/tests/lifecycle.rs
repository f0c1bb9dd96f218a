//! Registration, deletion, shutdown and configuration.

use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;
use tokio::net::TcpListener;
use tonic::Code;

use super::fixtures::{connect, open_stream, read_to_end, request, start_worker};
use super::mock_dispatcher::{task_def, MockDispatcher, WAIT};
use crate::{spawn, WorkerConfig, WorkerError};

const OFF: pb::ProcessingMode = pb::ProcessingMode::Off;

#[tokio::test]
async fn deleted_task_ends_its_streams_and_refuses_new_ones() {
    let forever = DatasetDef::range(10).repeat_forever();
    let dispatcher = MockDispatcher::start(vec![task_def(8, &forever, OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let mut stream = open_stream(&mut client, request(8, 0, 0)).await.expect("opens");
    let first = stream.message().await.expect("ok").expect("a batch");
    assert!(!first.elements.is_empty());

    tracing::info!("--- the dispatcher deletes the task");
    dispatcher.delete_task(8);
    let rest = tokio::time::timeout(WAIT, read_to_end(stream)).await.expect("the stream ends");
    assert!(!rest.end_of_sequence);
    let status = rest.error.expect("the stream fails");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("deleted"), "{status:?}");

    let status = client.get_elements(request(8, 0, 0)).await.expect_err("deleted task");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn worker_registers_again_when_the_dispatcher_forgets_it() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    let worker = start_worker(&dispatcher).await;
    dispatcher.wait_registrations(1).await;

    tracing::info!("--- the next heartbeat answers NotFound");
    dispatcher.forget_worker();
    dispatcher.wait_registrations(2).await;
    // And it heartbeats again afterwards.
    dispatcher.wait_heartbeats(1).await;

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_returns() {
    let forever = DatasetDef::range(10).repeat_forever();
    let dispatcher = MockDispatcher::start(vec![task_def(9, &forever, OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let mut stream = open_stream(&mut client, request(9, 0, 0)).await.expect("opens");
    stream.message().await.expect("ok").expect("a batch");

    tracing::info!("--- stop the worker while a stream is open");
    let reader = tokio::spawn(read_to_end(stream));
    tokio::time::timeout(WAIT, worker.shutdown()).await.expect("stops in time").expect("stops");
    let rest = tokio::time::timeout(WAIT, reader).await.expect("stream ends").expect("reader");
    assert!(!rest.end_of_sequence, "a stopped task does not claim end of sequence");

    dispatcher.shutdown().await;
}

#[tokio::test]
async fn invalid_config_is_refused_before_serving() {
    assert!(matches!(WorkerConfig::default().validate(), Err(WorkerError::Config(_))));
    let mut config = WorkerConfig::for_tests(vec!["127.0.0.1:1".into()]);
    assert!(config.validate().is_ok());
    config.max_bytes_per_message = u64::MAX;
    assert!(matches!(config.validate(), Err(WorkerError::Config(m)) if m.contains("max_bytes")));

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let registry = sluice_dataset::FunctionRegistry::builtin();
    let result = spawn(listener, WorkerConfig::default(), registry).await;
    assert!(matches!(result, Err(WorkerError::Config(m)) if m.contains("dispatcher")));
}

#[tokio::test]
async fn advertised_address_defaults_to_the_bound_port() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let config = WorkerConfig::for_tests(vec!["127.0.0.1:1".into()]);
    let worker =
        spawn(listener, config, sluice_dataset::FunctionRegistry::builtin()).await.expect("spawn");
    assert_eq!(worker.address(), format!("127.0.0.1:{port}"));
    worker.shutdown().await.expect("stops while still registering");
}

#[test]
fn requests_may_only_lower_the_message_bounds() {
    let config = WorkerConfig::default();
    let limits = |e, b| {
        let l = crate::service::message_limits(&config, e, b);
        format!("{l:?}")
    };
    assert_eq!(limits(0, 0), "Limits { max_elements: 64, max_bytes: 4194304 }");
    assert_eq!(limits(8, 1024), "Limits { max_elements: 8, max_bytes: 1024 }");
    assert_eq!(limits(1000, u64::MAX), "Limits { max_elements: 64, max_bytes: 4194304 }");
}
