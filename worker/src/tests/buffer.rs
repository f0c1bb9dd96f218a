//! A task's buffer on its own (no pipeline thread, no server): the channel is
//! filled by the test, as a pipeline thread fills it.

use std::time::Duration;

use sluice_dataset::{DatasetError, Element, Tensor};
use sluice_proto::contract::Reason;
use tonic::Code;

use super::fixtures::int_value;
use crate::buffer::{channel, framed_len, Limits, StopReason, StopSignal, Took};

fn element(v: i64) -> Element {
    Element::new(vec![Tensor::scalar_i64(v)])
}

fn values(elements: Vec<sluice_proto::v1::Element>) -> Vec<i64> {
    elements.into_iter().map(int_value).collect()
}

const ALL: Limits = Limits { max_elements: usize::MAX, max_bytes: u64::MAX };

#[tokio::test]
async fn a_batch_takes_what_is_buffered_up_to_its_bounds_and_carries_the_rest() {
    let (tx, buffer) = channel(1, "w:1".into(), 16);
    for v in 0..6 {
        tx.try_send(Ok(element(v))).expect("room");
    }
    let batch = buffer.next_batch(Limits::bounded(2, u64::MAX)).await.expect("a batch");
    assert_eq!(values(batch.elements), vec![0, 1], "the element bound");

    let size = framed_len(&element(0).into());
    let batch = buffer.next_batch(Limits::bounded(10, 2 * size)).await.expect("a batch");
    assert_eq!(values(batch.elements), vec![2, 3], "the byte bound");
    // 4 was taken from the channel but did not fit: it opens the next message.
    let batch = buffer.next_batch(Limits::bounded(1, 1)).await.expect("a batch");
    assert_eq!(values(batch.elements), vec![4], "alone over the byte bound, still sent");
    assert!(!batch.end_of_sequence);

    drop(tx);
    let batch = buffer.next_batch(ALL).await.expect("a batch");
    assert_eq!(values(batch.elements), vec![5]);
    assert!(batch.end_of_sequence, "the pipeline ended and the buffer is empty");
    let again = buffer.next_batch(ALL).await.expect("a batch");
    assert!(again.elements.is_empty() && again.end_of_sequence, "the end is answered again");
}

#[tokio::test]
async fn a_pipeline_error_is_delivered_after_the_elements_before_it_and_sticks() {
    let (tx, buffer) = channel(2, "w:1".into(), 16);
    tx.try_send(Ok(element(0))).expect("room");
    tx.try_send(Err(DatasetError::Split("lost".into()))).expect("room");
    let batch = buffer.next_batch(ALL).await.expect("the element before the error");
    assert_eq!(values(batch.elements), vec![0]);
    for _ in 0..2 {
        let status = buffer.next_batch(ALL).await.err().expect("the error, every time");
        assert_eq!(status.code(), Code::Internal);
        assert!(status.message().contains("task 2: pipeline failed"), "{status:?}");
        assert!(status.message().contains("lost"), "{status:?}");
    }
    assert!(matches!(buffer.take_one(Duration::ZERO).await, Err(s) if s.code() == Code::Internal));
}

#[tokio::test]
async fn a_pipeline_error_s_code_names_its_kind() {
    let file = || "/data/a.tfrecord".to_string();
    let message = || "m".to_string();
    let cases = [
        (
            DatasetError::Corrupt {
                format: "TFRecord",
                file: file(),
                offset: 0,
                message: message(),
            },
            Code::DataLoss,
        ),
        (DatasetError::NotFound { file: file(), message: message() }, Code::NotFound),
        (DatasetError::Forbidden { file: file(), message: message() }, Code::PermissionDenied),
        (DatasetError::Io { file: file(), message: message() }, Code::Internal),
    ];
    for (task_id, (error, code)) in (10..).zip(cases) {
        let (tx, buffer) = channel(task_id, "w:1".into(), 16);
        let text = error.to_string();
        tx.try_send(Err(error)).expect("room");
        let status = buffer.next_batch(ALL).await.err().expect("the error");
        assert_eq!(status.code(), code, "{status:?}");
        assert!(status.message().contains(&text), "{status:?}");
        assert_eq!(Reason::of(&status), None, "no reason: the client keys nothing on it");
    }
}

#[tokio::test]
async fn a_task_that_could_not_start_fails_every_request_with_the_reason() {
    let (tx, mut buffer) = channel(3, "w:1".into(), 16);
    drop(tx);
    buffer.fail_at_start("no thread".into());
    let status = buffer.next_batch(ALL).await.err().expect("not end of sequence");
    assert!(status.message().contains("no thread"), "{status:?}");
    assert!(!buffer.ended_when_drained().await);
}

#[tokio::test]
async fn take_one_answers_an_element_nothing_or_the_end() {
    let (tx, buffer) = channel(4, "w:1".into(), 16);
    assert!(matches!(buffer.take_one(Duration::ZERO).await, Ok(Took::Nothing)));
    tx.try_send(Ok(element(7))).expect("room");
    match buffer.take_one(Duration::ZERO).await {
        Ok(Took::Element(e)) => assert_eq!(int_value(e), 7),
        _ => panic!("the buffered element"),
    }
    drop(tx);
    assert!(matches!(buffer.take_one(Duration::ZERO).await, Ok(Took::Ended)));
}

#[tokio::test]
async fn a_drained_buffer_ends_only_once_every_element_was_taken() {
    let (tx, buffer) = channel(5, "w:1".into(), 16);
    assert!(!buffer.ended_when_drained().await, "the pipeline still runs");
    tx.try_send(Ok(element(0))).expect("room");
    drop(tx);
    assert!(!buffer.ended_when_drained().await, "an element is left for a reader");
    match buffer.take_one(Duration::ZERO).await {
        Ok(Took::Element(e)) => assert_eq!(int_value(e), 0, "the element kept for a reader"),
        _ => panic!("the kept element"),
    }
    assert!(buffer.ended_when_drained().await, "now every element was taken");
    let batch = buffer.next_batch(ALL).await.expect("a batch");
    assert!(batch.elements.is_empty() && batch.end_of_sequence);
}

#[test]
fn a_request_may_only_lower_the_bounds() {
    let own = Limits::bounded(64, 1000);
    let l = |e, b| {
        let l = own.lowered_to(e, b);
        (l.max_elements, l.max_bytes)
    };
    assert_eq!(l(0, 0), (64, 1000));
    assert_eq!(l(8, 10), (8, 10));
    assert_eq!(l(u32::MAX, u64::MAX), (64, 1000));
    assert_eq!((Limits::bounded(0, 0).max_elements, Limits::bounded(0, 0).max_bytes), (1, 1));
}

#[tokio::test]
async fn the_first_stop_reason_wins_and_a_deleted_task_says_so() {
    let stop = StopSignal::new();
    let watcher = stop.subscribe();
    stop.stop(StopReason::Deleted);
    stop.stop(StopReason::ShuttingDown);
    assert_eq!(stop.stopped().await, StopReason::Deleted);
    assert_eq!(*watcher.borrow(), Some(StopReason::Deleted));

    let status = StopReason::Deleted.status(9);
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(Reason::of(&status), Some(Reason::TaskDeleted));
    assert_eq!(StopReason::ShuttingDown.status(9).code(), Code::Unavailable);
}

#[tokio::test]
async fn occupancy_counts_what_the_pipeline_sent_and_no_consumer_took() {
    let (tx, buffer) = channel(9, "w:1".into(), 16);
    assert_eq!(buffer.occupancy().get(), (0, 0));
    for v in 0..6 {
        tx.try_send(Ok(element(v))).expect("room");
    }
    tx.try_send(Err(DatasetError::Split("lost".into()))).expect("room");
    assert_eq!(buffer.occupancy().get(), (6, 48), "six 8-byte scalars; the error is no element");
    let batch = buffer.next_batch(Limits::bounded(2, u64::MAX)).await.expect("a batch");
    assert_eq!(batch.elements.len(), 2);
    assert_eq!(buffer.occupancy().get(), (4, 32));
    let Took::Element(_) = buffer.take_one(Duration::from_secs(5)).await.expect("one") else {
        panic!("an element is buffered")
    };
    assert_eq!(buffer.occupancy().get(), (3, 24));
    let batch = buffer.next_batch(ALL).await.expect("the rest");
    assert_eq!(batch.elements.len(), 3);
    assert_eq!(buffer.occupancy().get(), (0, 0));
}
