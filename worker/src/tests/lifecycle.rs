//! Registration, deletion, shutdown and configuration.

use sluice_dataset::DatasetDef;
use sluice_proto::contract::Reason;
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
    // Through the element route's trailers: the reason readers act on.
    assert_eq!(Reason::of(&status), Some(Reason::TaskDeleted), "{status:?}");

    let status =
        client.get_elements(tokio_stream::once(request(8, 0, 0))).await.expect_err("deleted task");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(Reason::of(&status), Some(Reason::TaskDeleted), "{status:?}");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

/// A worker killed after a stream delivered a task's end but before its
/// heartbeat reported the finish left the dispatcher believing the task
/// unfinished; the restarted worker ran it again for consumers that had seen
/// its end, and the iteration never ended (the chaos `off` scenario, issue 31).
/// The end is delivered only once the dispatcher knows.
#[tokio::test]
async fn a_tasks_end_is_delivered_only_once_the_dispatcher_knows_it_finished() {
    let dispatcher = MockDispatcher::start(vec![task_def(8, &DatasetDef::range(5), OFF)]).await;
    dispatcher.refuse_finish_reports(2);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let stream = open_stream(&mut client, request(8, 0, 0)).await.expect("opens");
    let got = tokio::time::timeout(WAIT, read_to_end(stream)).await.expect("the stream ends");
    assert!(got.end_of_sequence && got.error.is_none(), "{:?}", got.error);
    assert_eq!(got.values, [0, 1, 2, 3, 4]);
    assert!(dispatcher.finished().contains(&8), "the end came before the finish was reported");
    // A stream opened after the end is told the end at once (the finish is known).
    let again = open_stream(&mut client, request(8, 0, 0)).await.expect("opens");
    let again = tokio::time::timeout(WAIT, read_to_end(again)).await.expect("it ends");
    assert!(again.end_of_sequence && again.values.is_empty());
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
fn an_advertised_address_that_readers_could_not_dial_safely_is_refused_at_start() {
    let config = |address: &str, tls: bool| {
        let mut c = WorkerConfig::for_tests(vec!["127.0.0.1:1".into()]);
        c.advertised_address = Some(address.to_string());
        let identity = (b"cert".to_vec(), b"key".to_vec());
        c.security.tls = tls.then(|| sluice_security::TlsSettings::from_pem(Some(identity), None));
        c
    };
    for (address, tls, want) in [
        ("not an address", false, "HOST:PORT"),
        ("10.0.0.1:99999", false, "port 99999"),
        ("http://10.0.0.1:5051", true, "plain-text (http://)"),
        ("ftp://10.0.0.1:5051", false, "unknown scheme"),
    ] {
        let err = config(address, tls).validate().unwrap_err().to_string();
        assert!(err.contains("--advertise") && err.contains(want), "{address}: {err}");
    }
    // A matching scheme is dropped: readers are given HOST:PORT.
    let c = config("https://worker-0.pool:5051", true);
    assert_eq!(c.advertised().unwrap().as_deref(), Some("worker-0.pool:5051"));
    assert_eq!(config("[::1]:5051", false).advertised().unwrap().as_deref(), Some("[::1]:5051"));
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

/// A panic inside the iterator a dataset function returned fails the task's
/// stream with an error naming it (the executor catches it as a `Function`
/// error); it never passes for the end of the data.
#[tokio::test]
async fn a_panicking_pipeline_fails_its_stream_and_never_ends_it_cleanly() {
    let mut registry = sluice_dataset::FunctionRegistry::builtin();
    registry.register_dataset_fn("explode", 0, |e, _| {
        let mut first = Some(e);
        Ok(Box::new(std::iter::from_fn(move || match first.take() {
            Some(e) => Some(Ok(e)),
            None => panic!("boom in the third iteration"),
        })))
    });
    let def = DatasetDef::range(3).flat_map("explode", vec![]);
    let dispatcher = MockDispatcher::start(vec![task_def(9, &def, OFF)]).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind worker");
    let config = WorkerConfig::for_tests(vec![dispatcher.address()]);
    let worker = spawn(listener, config, registry).await.expect("spawn worker");
    let mut client = connect(&worker).await;
    let stream = open_stream(&mut client, request(9, 0, 0)).await.expect("opens");
    let got = tokio::time::timeout(WAIT, read_to_end(stream)).await.expect("the stream ends");
    assert!(!got.end_of_sequence, "a panic must not end the sequence: {got:?}");
    assert_eq!(got.values, vec![0], "the element before the panic arrives");
    let status = got.error.expect("the stream fails");
    assert!(status.message().contains("panicked: boom in the third iteration"), "{status:?}");
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}
