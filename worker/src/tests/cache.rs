//! The cross-trainer cache's window on its own (no I/O), and one cache task served
//! by a real worker against the mock dispatcher.

use sluice_dataset::{DatasetDef, Element, Tensor};
use sluice_proto::v1 as pb;
use tonic::Code;

use super::fixtures::{connect, int_value, open_stream, request, start_worker};
use super::mock_dispatcher::{task_def, MockDispatcher, WAIT};
use crate::buffer::framed_len;
use crate::buffer::Limits;
use crate::cache::Window;

fn element(v: i64) -> pb::Element {
    pb::Element::from(Element::new(vec![Tensor::scalar_i64(v)]))
}

fn values(batch: Option<Vec<pb::Element>>) -> Vec<i64> {
    batch.expect("cached elements").into_iter().map(int_value).collect()
}

const ALL: Limits = Limits { max_elements: usize::MAX, max_bytes: u64::MAX };

#[test]
fn the_window_keeps_exactly_what_fits_and_evicts_the_oldest() {
    let size = framed_len(&element(0));
    let mut w = Window::new(3 * size + size - 1);
    for v in 0..10 {
        w.insert(1, element(v)).unwrap();
        assert!(w.bytes() < 4 * size);
    }
    assert_eq!(w.bytes(), 3 * size, "three fit, a fourth does not");
    assert_eq!((w.first(), w.end()), (7, 10));
}

#[test]
fn cursors_start_at_the_oldest_element_never_repeat_and_skip_when_behind() {
    let size = framed_len(&element(0));
    let mut w = Window::new(4 * size);
    for v in 0..4 {
        w.insert(1, element(v)).unwrap();
    }
    assert_eq!(values(w.read(1, "a", Limits::bounded(2, u64::MAX)).unwrap()), vec![0, 1]);
    assert_eq!(values(w.read(1, "b", ALL).unwrap()), vec![0, 1, 2, 3], "new trainer: oldest");
    assert_eq!(w.read(1, "b", ALL).unwrap(), None, "b read everything: the window must grow");
    for v in 4..8 {
        w.insert(1, element(v)).unwrap();
    }
    // a's cursor (2) fell behind the window [4, 8): it jumps to 4 and the skip counts.
    assert_eq!(values(w.read(1, "a", ALL).unwrap()), vec![4, 5, 6, 7]);
    assert_eq!(w.skipped(), 2);
    assert_eq!(values(w.read(1, "b", Limits::bounded(10, 2 * size)).unwrap()), vec![4, 5]);
    assert_eq!(w.cursors().get("b"), Some(&6));
}

#[test]
fn a_message_holds_at_least_one_element_even_over_the_byte_bound() {
    let mut w = Window::new(1 << 20);
    for v in 0..3 {
        w.insert(1, element(v)).unwrap();
    }
    assert_eq!(values(w.read(1, "a", Limits::bounded(10, 1)).unwrap()), vec![0]);
}

#[test]
fn an_element_larger_than_the_cache_fails_it_for_good_naming_both_sizes() {
    let size = framed_len(&element(0));
    let mut w = Window::new(size - 1);
    let err = w.insert(9, element(0)).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let expected =
        format!("is {size} bytes, larger than the whole cross-trainer cache of {} bytes", size - 1);
    assert!(err.message().contains(&expected), "{}", err.message());
    let again = w.read(9, "a", ALL).unwrap_err();
    assert_eq!(again.message(), err.message(), "sticky");
}

#[tokio::test]
async fn a_cache_task_needs_a_trainer_id_and_ends_with_an_error_on_a_finite_dataset() {
    let mut def = task_def(5, &DatasetDef::range(3), pb::ProcessingMode::Off);
    def.use_cross_trainer_cache = true;
    let dispatcher = MockDispatcher::start(vec![def]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    // Without a trainer id: refused once the task is known.
    let status = open_stream(&mut client, request(5, 0, 0)).await.expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("trainer_id"), "{status:?}");

    let mut req = request(5, 0, 0);
    req.trainer_id = "t".into();
    let mut stream = open_stream(&mut client, req).await.expect("opens");
    let mut got = vec![];
    let err = tokio::time::timeout(WAIT, async {
        loop {
            match stream.message().await {
                Ok(Some(batch)) => got.extend(batch.elements.into_iter().map(int_value)),
                Ok(None) => panic!("the stream must fail, not end"),
                Err(status) => return status,
            }
        }
    })
    .await
    .expect("the stream fails before the deadline");
    assert_eq!(got, vec![0, 1, 2], "what was cached is delivered first");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("needs an infinite dataset"), "{err:?}");
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}
