//! Exactly-once tasks (docs/exactly-once.md): the stream's messages carry their
//! elements' origins in `positions`, a split's skip runs are not produced, and a
//! `wait` answer is followed by asking again.

use sluice_dataset::{Arg, DatasetDef, Element};
use sluice_positions::wire::split_positions;
use sluice_positions::Origin;
use sluice_proto::compression::decompress;
use sluice_proto::v1 as pb;
use tonic::{Status, Streaming};

use super::fixtures::{connect, open_stream, request, start_worker};
use super::mock_dispatcher::{task_def, MockDispatcher};

const DYNAMIC: pb::ProcessingMode = pb::ProcessingMode::Dynamic;

fn exactly_once_task(task_id: u64, def: &DatasetDef) -> pb::TaskDef {
    pb::TaskDef { exactly_once: true, ..task_def(task_id, def, DYNAMIC) }
}

/// Every message of a stream, and the error that ended it, if any.
async fn read_batches(
    mut stream: Streaming<pb::ElementBatch>,
) -> (Vec<pb::ElementBatch>, Option<Status>) {
    let mut batches = Vec::new();
    loop {
        match stream.message().await {
            Ok(Some(batch)) => batches.push(batch),
            Ok(None) => return (batches, None),
            Err(status) => return (batches, Some(status)),
        }
    }
}

/// The int64 values of an element (a scalar or a batch of them).
fn values(element: pb::Element) -> Vec<i64> {
    let e = Element::try_from(element).expect("a valid element");
    e.components[0]
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Each element's values with its origin, and every message's own origin.
fn decode(batches: Vec<pb::ElementBatch>) -> (Vec<(Vec<i64>, Origin)>, Vec<Origin>) {
    let (mut elements, mut messages) = (Vec::new(), Vec::new());
    for batch in batches {
        let received = match &batch.compressed {
            Some(frame) => decompress(frame, 64 << 20).expect("a valid frame"),
            None => batch.elements,
        };
        let positions = batch.positions.as_ref().expect("every message carries positions");
        let (per_element, message) =
            split_positions(positions, received.len()).expect("well-formed positions");
        let origins = (0..per_element.len()).map(|i| per_element.origin(i));
        for (e, origin) in received.into_iter().zip(origins) {
            assert!(e.origin.is_none(), "origins travel in positions, not in the elements");
            elements.push((values(e), origin));
        }
        messages.push(message);
    }
    (elements, messages)
}

/// Every record the origins name, sorted: a record named twice appears twice.
fn records<'a>(origins: impl IntoIterator<Item = &'a Origin>) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = origins
        .into_iter()
        .flat_map(|o| &o.runs)
        .flat_map(|r| (r.first..r.end()).map(move |k| (r.unit, k)))
        .collect();
    all.sort_unstable();
    all
}

#[tokio::test]
async fn positions_cover_the_granted_records_once_and_skip_runs_are_not_produced() {
    let def =
        DatasetDef::range(40).filter_with("mod_eq", vec![Arg::Int(3), Arg::Int(0)]).batch(2, false);
    let dispatcher = MockDispatcher::start(vec![exactly_once_task(1, &def)]).await;
    dispatcher.set_splits(vec![(0, 10), (20, 30)]);
    tracing::info!("--- units 21 and 25 were consumed before: the re-grant skips them");
    dispatcher.set_skip_runs(1, vec![21, 0, 1, 25, 0, 1]);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let (batches, error) =
        read_batches(open_stream(&mut client, request(1, 2, 0)).await.expect("opens")).await;
    assert!(error.is_none(), "{error:?}");
    assert!(batches.last().is_some_and(|b| b.end_of_sequence));
    let (elements, messages) = decode(batches);

    let got: Vec<i64> = elements.iter().flat_map(|(v, _)| v.clone()).collect();
    assert_eq!(got, vec![0, 3, 6, 9, 24, 27], "21 was consumed already");
    for (vals, origin) in &elements {
        let units: Vec<i64> = origin
            .runs
            .iter()
            .filter(|r| {
                // Only the element's own values; filtered units ride along.
                vals.contains(&(r.unit as i64))
            })
            .map(|r| r.unit as i64)
            .collect();
        assert_eq!(&units, vals, "each element names its own units");
    }
    let granted: Vec<(u64, u64)> =
        (0..10).chain(20..30).filter(|u| *u != 21 && *u != 25).map(|u| (u, 0)).collect();
    let all = records(elements.iter().map(|(_, o)| o).chain(&messages));
    assert_eq!(all, granted, "every granted, unconsumed record exactly once");

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn positions_stay_outside_compressed_frames() {
    let dispatcher =
        MockDispatcher::start(vec![exactly_once_task(5, &DatasetDef::range(3000))]).await;
    dispatcher.set_splits(vec![(0, 3000)]);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let req =
        pb::GetElementsRequest { compression: pb::Compression::Zstd as i32, ..request(5, 0, 0) };
    let (batches, error) = read_batches(open_stream(&mut client, req).await.expect("opens")).await;
    assert!(error.is_none(), "{error:?}");
    assert!(batches.iter().any(|b| b.compressed.is_some()), "some messages were compressed");
    let (elements, _) = decode(batches);
    assert_eq!(elements.len(), 3000);
    for (vals, origin) in &elements {
        assert_eq!(origin.runs.len(), 1);
        assert_eq!(vals, &[origin.runs[0].unit as i64], "positions match the frame's elements");
    }
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn a_task_that_is_not_exactly_once_sends_no_positions() {
    let def = DatasetDef::range(10);
    let dispatcher = MockDispatcher::start(vec![task_def(2, &def, DYNAMIC)]).await;
    dispatcher.set_splits(vec![(0, 10)]);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let (batches, error) =
        read_batches(open_stream(&mut client, request(2, 3, 0)).await.expect("opens")).await;
    assert!(error.is_none(), "{error:?}");
    assert!(batches.len() > 1);
    for b in &batches {
        assert!(b.positions.is_none(), "{b:?}");
        assert!(b.elements.iter().all(|e| e.origin.is_none()));
    }
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn a_wait_answer_is_followed_by_asking_again_with_the_next_sequence() {
    let dispatcher =
        MockDispatcher::start(vec![exactly_once_task(3, &DatasetDef::range(10))]).await;
    dispatcher.answer_wait(2);
    dispatcher.set_splits(vec![(4, 8)]);
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let (batches, error) =
        read_batches(open_stream(&mut client, request(3, 0, 0)).await.expect("opens")).await;
    assert!(error.is_none(), "{error:?}");
    let (elements, _) = decode(batches);
    let got: Vec<i64> = elements.iter().flat_map(|(v, _)| v.clone()).collect();
    assert_eq!(got, vec![4, 5, 6, 7], "the grant after the waits");
    assert_eq!(dispatcher.split_sequences(), vec![0, 1, 2, 3], "wait, wait, the split, the end");
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn malformed_skip_runs_fail_the_task_with_a_clear_error() {
    let too_many: Vec<u64> = (0..65_537).flat_map(|_| [0, 0, 1]).collect();
    for (flat, says) in [
        (vec![1, 0], "not a multiple of 3"),
        (vec![12, 0, 1], "outside the split"),
        (too_many, "above the 65536 of one grant"),
    ] {
        let dispatcher =
            MockDispatcher::start(vec![exactly_once_task(4, &DatasetDef::range(10))]).await;
        dispatcher.set_splits(vec![(0, 5)]);
        dispatcher.set_skip_runs(0, flat);
        let worker = start_worker(&dispatcher).await;
        let mut client = connect(&worker).await;
        let (_, error) =
            read_batches(open_stream(&mut client, request(4, 0, 0)).await.expect("opens")).await;
        let error = error.expect("the stream fails");
        assert!(
            error.message().contains("malformed skip_runs") && error.message().contains(says),
            "{error:?}"
        );
        worker.shutdown().await.expect("worker stops");
        dispatcher.shutdown().await;
    }
}

#[tokio::test]
async fn a_task_whose_pipeline_is_not_replayable_fails_naming_the_stage() {
    let repeated = exactly_once_task(6, &DatasetDef::range(10).repeat(2));
    let text = pb::TaskDef {
        counted_units: false,
        ..exactly_once_task(7, &DatasetDef::text_lines(vec!["a.txt"]))
    };
    let dispatcher = MockDispatcher::start(vec![repeated, text]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    for (task, says) in
        [(6, "stages[1].repeat"), (7, "counts this exactly-once task's units as one record each")]
    {
        let (batches, error) =
            read_batches(open_stream(&mut client, request(task, 0, 0)).await.expect("opens")).await;
        assert!(batches.is_empty());
        let error = error.expect("the task failed");
        assert!(error.message().contains(says), "{error:?}");
    }
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}
