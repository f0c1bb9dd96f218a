//! GetElements: what streams deliver, in OFF and DYNAMIC mode, and how they fail.

use std::collections::BTreeSet;

use sluice_dataset::DatasetDef;
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use tonic::Code;

use super::fixtures::{connect, open_stream, read_to_end, request, start_worker};
use super::mock_dispatcher::{task_def, MockDispatcher};

const OFF: pb::ProcessingMode = pb::ProcessingMode::Off;
const DYNAMIC: pb::ProcessingMode = pb::ProcessingMode::Dynamic;

#[tokio::test]
async fn off_task_streams_range_in_batches_then_reports_finished() {
    let dispatcher = MockDispatcher::start(vec![task_def(1, &DatasetDef::range(100), OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    tracing::info!("--- read the whole task");
    let stream = open_stream(&mut client, request(1, 0, 0)).await.expect("stream opens");
    let got = read_to_end(stream).await;
    assert!(got.error.is_none(), "stream failed: {:?}", got.error);
    assert!(got.end_of_sequence, "the stream ends with end_of_sequence");
    assert_eq!(got.values, (0..100).collect::<Vec<_>>());
    assert!(
        got.batch_sizes.iter().any(|&n| n > 1),
        "several elements per message: {:?}",
        got.batch_sizes
    );

    tracing::info!("--- the dispatcher hears the task finished");
    dispatcher.wait_finished(1).await;

    tracing::info!("--- a finished task answers a lone end_of_sequence");
    let stream = open_stream(&mut client, request(1, 0, 0)).await.expect("stream opens");
    let again = read_to_end(stream).await;
    assert!(again.error.is_none() && again.end_of_sequence && again.values.is_empty(), "{again:?}");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn dynamic_task_streams_exactly_the_elements_of_its_splits() {
    let dispatcher =
        MockDispatcher::start(vec![task_def(2, &DatasetDef::range(100), DYNAMIC)]).await;
    dispatcher.set_splits(vec![(0, 10), (30, 35), (90, 100)]);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let got = read_to_end(open_stream(&mut client, request(2, 0, 0)).await.expect("opens")).await;
    assert!(got.error.is_none(), "stream failed: {:?}", got.error);
    assert!(got.end_of_sequence);
    let expected: Vec<i64> = (0..10).chain(30..35).chain(90..100).collect();
    assert_eq!(got.values, expected);
    dispatcher.wait_finished(2).await;

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn split_request_is_resent_with_the_same_sequence_after_a_failure() {
    let dispatcher =
        MockDispatcher::start(vec![task_def(3, &DatasetDef::range(20), DYNAMIC)]).await;
    dispatcher.set_splits(vec![(0, 10), (10, 20)]);
    dispatcher.fail_get_split_times(1);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let got = read_to_end(open_stream(&mut client, request(3, 0, 0)).await.expect("opens")).await;
    assert!(got.error.is_none() && got.end_of_sequence, "{got:?}");
    assert_eq!(got.values, (0..20).collect::<Vec<_>>(), "each split delivered once");

    let seen = dispatcher.split_sequences();
    assert_eq!(seen.get(..4), Some(&[0, 0, 1, 2][..]), "failed attempt resent as 0: {seen:?}");
    assert!(seen[3..].windows(2).all(|w| w[0] < w[1]), "no other resend: {seen:?}");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn unknown_task_is_unavailable() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let status = client
        .get_elements(tokio_stream::once(request(999, 0, 0)))
        .await
        .expect_err("unknown task");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("task 999 is not known"), "{status:?}");
    assert_eq!(Reason::of(&status), Some(Reason::TaskNotYetKnown), "{status:?}");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn pipeline_error_fails_the_stream_and_every_later_request() {
    let dispatcher =
        MockDispatcher::start(vec![task_def(4, &DatasetDef::range(10), DYNAMIC)]).await;
    dispatcher.refuse_get_split();
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let got = read_to_end(open_stream(&mut client, request(4, 0, 0)).await.expect("opens")).await;
    let status = got.error.expect("the stream fails");
    assert_eq!(status.code(), Code::Internal);
    assert!(status.message().starts_with("task 4: pipeline failed:"), "{status:?}");
    assert!(status.message().contains("no splits for you"), "names the cause: {status:?}");

    tracing::info!("--- the error is sticky");
    let later = read_to_end(open_stream(&mut client, request(4, 0, 0)).await.expect("opens")).await;
    let later = later.error.expect("a later stream fails too");
    assert_eq!((later.code(), later.message()), (status.code(), status.message()));

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn task_with_an_invalid_dataset_fails_instead_of_hanging() {
    let invalid = DatasetDef { stages: vec![] };
    let dispatcher = MockDispatcher::start(vec![task_def(5, &invalid, OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let got = read_to_end(open_stream(&mut client, request(5, 0, 0)).await.expect("opens")).await;
    let status = got.error.expect("the stream fails");
    assert_eq!(status.code(), Code::Internal);
    assert!(status.message().contains("stages"), "names the field: {status:?}");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn two_streams_on_one_task_get_every_element_exactly_once() {
    let dispatcher = MockDispatcher::start(vec![task_def(6, &DatasetDef::range(2000), OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut a = connect(&worker).await;
    let mut b = connect(&worker).await;

    let first = open_stream(&mut a, request(6, 7, 0)).await.expect("opens");
    let second = open_stream(&mut b, request(6, 5, 0)).await.expect("opens");
    let (first, second) = tokio::join!(read_to_end(first), read_to_end(second));
    for got in [&first, &second] {
        assert!(got.error.is_none() && got.end_of_sequence, "{got:?}");
    }
    assert!(first.batch_sizes.iter().all(|&n| n <= 7), "request bound respected");
    assert!(second.batch_sizes.iter().all(|&n| n <= 5), "request bound respected");

    let mut all: Vec<i64> = first.values.iter().chain(&second.values).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..2000).collect::<Vec<_>>(), "every element exactly once");
    // Each stream sees its share in pipeline order.
    for got in [&first, &second] {
        assert!(got.values.windows(2).all(|w| w[0] < w[1]));
    }

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn byte_bound_sends_an_oversized_element_alone() {
    let values: Vec<String> = (0..10).map(|i| format!("{i:0>100}")).collect();
    let def = DatasetDef::from_strings(values.clone());
    let dispatcher = MockDispatcher::start(vec![task_def(7, &def, OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    // Smaller than one element: every message carries exactly one.
    let mut stream = open_stream(&mut client, request(7, 0, 50)).await.expect("opens");
    let mut got = Vec::new();
    let mut ended = false;
    while let Some(batch) = stream.message().await.expect("stream ok") {
        assert!(batch.elements.len() <= 1, "one oversized element per message");
        for element in batch.elements {
            let element = sluice_dataset::Element::try_from(element).expect("element");
            let items = element.components[0].items().expect("string items");
            got.push(String::from_utf8(items[0].to_vec()).expect("utf-8"));
        }
        ended = batch.end_of_sequence;
    }
    assert!(ended);
    assert_eq!(got, values);
    let distinct: BTreeSet<_> = got.iter().collect();
    assert_eq!(distinct.len(), 10);

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

/// A restarted worker whose task has no splits left, while its consumers already saw
/// the end of sequence from the previous process: nobody opens a stream, yet the
/// task must be reported finished, or its iteration never ends (found by `sluice
/// chaos`, scenario workers, seed 1).
#[tokio::test]
async fn a_task_whose_pipeline_ends_with_no_reader_is_reported_finished() {
    let dispatcher =
        MockDispatcher::start(vec![task_def(3, &DatasetDef::range(100), DYNAMIC)]).await;
    dispatcher.set_splits(vec![]);
    let worker = start_worker(&dispatcher).await;
    dispatcher.wait_finished(3).await;

    // A late reader gets the end of sequence, nothing else.
    let mut client = connect(&worker).await;
    let got = read_to_end(open_stream(&mut client, request(3, 0, 0)).await.expect("opens")).await;
    assert!(got.error.is_none() && got.end_of_sequence && got.values.is_empty(), "{got:?}");
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

/// Elements still buffered when the pipeline ends keep the task open until a
/// stream takes them: finishing early would let consumers stop reading it.
#[tokio::test]
async fn a_task_with_buffered_elements_finishes_only_when_a_stream_takes_them() {
    let dispatcher = MockDispatcher::start(vec![task_def(4, &DatasetDef::range(5), OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    // Wait until the pipeline has certainly ended (its 5 elements fit the buffer):
    // the dispatcher has heard heartbeats since, and the task is still not finished.
    dispatcher.wait_heartbeats(3).await;
    assert!(!dispatcher.finished().contains(&4), "finished before anyone read its elements");
    let mut client = connect(&worker).await;
    let got = read_to_end(open_stream(&mut client, request(4, 0, 0)).await.expect("opens")).await;
    assert_eq!(got.values, (0..5).collect::<Vec<_>>());
    dispatcher.wait_finished(4).await;
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}
