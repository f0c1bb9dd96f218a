//! The stream's side of exactly-once reads, over fake messages: origins as the
//! task readers split them from `ElementBatch.positions` (built with
//! `join_positions`), through a manager that only sends them.

use futures::StreamExt;
use sluice_dataset::Tensor;
use sluice_positions::wire::join_positions;

use sluice_positions::Origin;

use super::*;
use crate::exactly_once::take_origins;
use crate::retry::RetryPolicy;

/// A message of `task` with one element per unit (record 0 of each), as the task
/// reader makes it of a worker's batch.
pub(crate) fn message(task: u64, units: &[u64], c: &Consumption) -> Received {
    let p = join_positions(units.iter().map(|u| Origin::record(*u, 0)), Origin::default());
    let origins = take_origins(Some(p), units.len(), task, c, "w:1").unwrap().expect("not lost");
    let elements =
        units.iter().map(|u| Element::new(vec![Tensor::scalar_i64(*u as i64)])).collect();
    Received {
        source: Arc::from("w:1"),
        task_id: task,
        elements,
        origins,
        split: None,
        drained_tasks: 0,
        credit: Default::default(),
    }
}

fn unit_of(e: &Element) -> u64 {
    e.components[0].i64_values().unwrap()[0] as u64
}

fn info(consumption: Option<Arc<Consumption>>) -> StreamInfo {
    // Nothing listens there: reports fail and are kept, which these tests ignore.
    let dispatcher =
        DispatcherClient::new(&["127.0.0.1:9".to_string()], RetryPolicy::for_tests()).unwrap();
    let delivery = if consumption.is_some() { Delivery::ExactlyOnce } else { Delivery::AtMostOnce };
    StreamInfo {
        dispatcher,
        job_name: "job".into(),
        consumer: None,
        iteration_id: 1,
        client_id: 1,
        delivery,
        at_most_once_reason: String::new(),
        consumption,
        order: None,
    }
}

/// An exactly-once stream whose manager sends `make(consumption)` and ends.
pub(crate) fn eo_stream(
    make: impl FnOnce(&Consumption) -> Vec<Received>,
) -> (ElementStream, Arc<Consumption>) {
    let c = Arc::new(Consumption::new("job".into(), "ds".into(), 0, None));
    let batches = make(&c);
    let stream = ElementStream::start(
        info(Some(c.clone())),
        16,
        tracing::Span::none(),
        |tx, _| async move {
            for b in batches {
                if tx.send(Ok(b)).await.is_err() {
                    return;
                }
            }
        },
    );
    (stream, c)
}

#[tokio::test]
async fn elements_are_consumed_when_taken_not_when_they_arrive() {
    let (mut s, _) = eo_stream(|c| vec![message(1, &[0, 1, 2], c), message(1, &[3, 4], c)]);
    assert_eq!(s.delivery(), Delivery::ExactlyOnce);
    let e = s.next().await.unwrap().unwrap();
    let (_, e2) = s.next_with_source().await.unwrap().unwrap();
    assert_eq!((unit_of(&e), unit_of(&e2)), (0, 1));
    let p = s.position().unwrap();
    assert_eq!(p.generation, 0);
    assert!(p.consumed.contains(0, 0) && p.consumed.contains(1, 0));
    for u in 2..5 {
        assert!(!p.consumed.contains(u, 0), "unit {u} arrived but was not taken");
    }
    let rest: Vec<u64> = s.map(|e| unit_of(&e.unwrap())).collect().await;
    assert_eq!(rest, vec![2, 3, 4]);
}

#[tokio::test]
async fn the_elements_held_of_a_lost_task_are_dropped_and_never_consumed() {
    let (mut s, c) = eo_stream(|c| {
        vec![
            message(1, &[0, 1, 2], c),
            message(2, &[10], c),
            message(1, &[3], c),
            message(2, &[11], c),
        ]
    });
    assert_eq!(unit_of(&s.next().await.unwrap().unwrap()), 0);
    c.task_lost(1);
    let rest: Vec<u64> = (&mut s).map(|e| unit_of(&e.unwrap())).collect().await;
    assert_eq!(rest, vec![10, 11], "nothing more of task 1, in hand or in the channel");
    let p = s.position().unwrap();
    assert!(p.consumed.contains(0, 0) && p.consumed.contains(10, 0) && p.consumed.contains(11, 0));
    for u in 1..4 {
        assert!(!p.consumed.contains(u, 0), "unit {u} of the lost task was not delivered");
    }
}

#[tokio::test]
async fn an_at_most_once_stream_has_no_position() {
    let mut s = ElementStream::start(info(None), 4, tracing::Span::none(), |tx, _| async move {
        let e = Element::new(vec![Tensor::scalar_i64(7)]);
        let _ = tx.send(Ok(Received::plain(Arc::from("w:1"), 1, vec![e]))).await;
    });
    assert_eq!(unit_of(&s.next().await.unwrap().unwrap()), 7);
    let e = s.position().unwrap_err();
    assert!(e.to_string().contains("exactly_once"), "{e}");
    assert_eq!(s.delivery(), Delivery::AtMostOnce);
}
