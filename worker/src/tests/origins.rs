//! Exactly-once origins through a task's buffer (no pipeline thread, no server):
//! each element's origin stays apart from its wire form, in step with it (also
//! across the byte bound's carry), and a message's positions are written from
//! them as `join_positions` would write the same origins.

use sluice_dataset::{Element, Tensor};
use sluice_positions::wire::{join_positions, split_positions};
use sluice_positions::{Origin, Run, Tag};

use super::fixtures::int_value;
use crate::buffer::{channel, framed_len, Batch, Limits};
use crate::producer::positions;

const ALL: Limits = Limits { max_elements: usize::MAX, max_bytes: u64::MAX };

fn tagged(v: i64, origin: Option<Tag>) -> Element {
    let mut e = Element::new(vec![Tensor::scalar_i64(v)]);
    e.origin = origin;
    e
}

/// What the batch's positions say of each element, and its own origin.
fn split(batch: &Batch, own: Origin) -> (Vec<Origin>, Origin) {
    let (per, own) =
        split_positions(&positions(batch, own), batch.elements.len()).expect("well formed");
    ((0..per.len()).map(|i| per.origin(i)).collect(), own)
}

#[tokio::test]
async fn origins_stay_with_their_elements_across_the_byte_bound() {
    let (tx, buffer) = channel(1, "w:1".into(), 16);
    let mut two = Origin::record(7, 0);
    two.push_run(Run::record(9, 0));
    two.push_end(9, 1);
    let origins = [Tag::record(0, 0), Tag::Run(Run { unit: 1, first: 0, count: 3 }), two.into()];
    for (v, o) in origins.iter().enumerate() {
        tx.try_send(Ok(tagged(v as i64, Some(o.clone())))).expect("room");
    }
    let one = framed_len(&tagged(0, None).into_pb_and_origin().0);
    // Room for one element and its origin, not two: the second is carried.
    let batch = buffer.next_batch(Limits::bounded(10, one + 4)).await.expect("a batch");
    assert_eq!(batch.elements.len(), 1);
    let batch2 = buffer.next_batch(ALL).await.expect("a batch");
    for b in [&batch, &batch2] {
        assert!(b.elements.iter().all(|e| e.origin.is_none()), "no per-element origin on the wire");
        assert_eq!(b.origins.len(), b.elements.len(), "one origin per element");
    }
    let values: Vec<i64> = batch2.elements.iter().cloned().map(int_value).collect();
    assert_eq!(values, vec![1, 2], "the carried element opens the next message");
    assert_eq!(batch2.origins, vec![Some(origins[1].clone()), Some(origins[2].clone())]);

    let (per, own) = split(&batch2, Origin::record(20, 0));
    assert_eq!(per[0].runs, origins[1].runs());
    assert_eq!(per[1].runs, origins[2].runs());
    assert_eq!(own.runs, vec![Run::record(20, 0)]);
    assert_eq!(own.unit_ends, vec![(9, 1)], "the unit end rides with the message");
    let want = join_positions(
        batch2.origins.iter().map(|o| o.clone().map(Tag::into_origin).unwrap_or_default()),
        Origin::record(20, 0),
    );
    assert_eq!(positions(&batch2, Origin::record(20, 0)), want);
}

#[test]
fn an_element_without_an_origin_keeps_its_place() {
    let mut batch = Batch::default();
    let pb = |v| tagged(v, None).into_pb_and_origin().0;
    batch.push(pb(0), None);
    assert!(batch.origins.is_empty(), "untagged batches hold no origins");
    batch.push(pb(1), Some(Tag::record(1, 0)));
    batch.push(pb(2), None);
    batch.push(pb(3), Some(Tag::record(3, 0)));
    assert_eq!(batch.origins.len(), 4);
    let (per, _) = split(&batch, Origin::default());
    let units: Vec<Vec<u64>> =
        per.iter().map(|o| o.runs.iter().map(|r| r.unit).collect()).collect();
    assert_eq!(units, vec![vec![], vec![1], vec![], vec![3]]);
}
