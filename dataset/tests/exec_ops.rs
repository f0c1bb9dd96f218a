//! Each executor op against hand-computed values (run locally with the built-ins).

mod common;

use common::{ints, json, run};
use serde_json::json;
use sluice_dataset::{Arg, DType, DatasetDef};

#[test]
fn range_map_square() {
    assert_eq!(ints(&DatasetDef::range(5).map("square")), vec![0, 1, 4, 9, 16]);
}

#[test]
fn range_with_start_and_negative_step() {
    assert_eq!(ints(&DatasetDef::range_with(3, 12, 4)), vec![3, 7, 11]);
    assert_eq!(ints(&DatasetDef::range_with(5, -1, -2)), vec![5, 3, 1]);
    assert_eq!(ints(&DatasetDef::range_with(5, 5, 1)), Vec::<i64>::new());
    assert_eq!(
        ints(&DatasetDef::range_with(i64::MAX - 2, i64::MAX, 1)),
        vec![i64::MAX - 2, i64::MAX - 1]
    );
}

#[test]
fn from_tensor_slices_makes_scalars_of_each_kind() {
    assert_eq!(ints(&DatasetDef::from_ints(vec![4, -1])), vec![4, -1]);
    let floats = run(&DatasetDef::from_floats(vec![1.5, -2.0]));
    let t = &floats[0].as_ref().expect("ok").components[0];
    assert_eq!((t.dtype(), t.shape()), (DType::Float32, &[][..]));
    assert_eq!(json(&DatasetDef::from_floats(vec![1.5, -2.0])), vec![json!(1.5), json!(-2.0)]);
    let strings = run(&DatasetDef::from_strings(vec!["a", "bc"]));
    assert_eq!(strings[1].as_ref().expect("ok").components[0].dtype(), DType::String);
    assert_eq!(json(&DatasetDef::from_strings(vec!["a", "bc"])), vec![json!("a"), json!("bc")]);
    let bytes = run(&DatasetDef::from_bytes(vec![vec![1, 2], vec![]]));
    let t = &bytes[0].as_ref().expect("ok").components[0];
    assert_eq!(t.dtype(), DType::Bytes);
    assert_eq!(t.items().expect("items")[0].as_ref(), &[1, 2]);
}

#[test]
fn batch_stacks_and_keeps_the_remainder() {
    let out = run(&DatasetDef::range(10).batch(4, false));
    let shapes: Vec<Vec<u64>> =
        out.iter().map(|e| e.as_ref().expect("ok").components[0].shape().to_vec()).collect();
    assert_eq!(shapes, vec![vec![4], vec![4], vec![2]]);
    assert_eq!(
        json(&DatasetDef::range(10).batch(4, false)),
        vec![json!([0, 1, 2, 3]), json!([4, 5, 6, 7]), json!([8, 9])]
    );
}

#[test]
fn batch_drop_remainder_drops_the_partial_batch() {
    assert_eq!(
        json(&DatasetDef::range(10).batch(4, true)),
        vec![json!([0, 1, 2, 3]), json!([4, 5, 6, 7])]
    );
    assert_eq!(json(&DatasetDef::range(3).batch(4, true)), Vec::<serde_json::Value>::new());
    assert_eq!(json(&DatasetDef::range(0).batch(4, false)), Vec::<serde_json::Value>::new());
}

#[test]
fn batch_of_batches_has_two_leading_dimensions() {
    let out = run(&DatasetDef::range(8).batch(2, false).batch(2, false));
    assert_eq!(out[0].as_ref().expect("ok").components[0].shape(), &[2, 2]);
    assert_eq!(
        json(&DatasetDef::range(8).batch(2, false).batch(2, false)),
        vec![json!([[0, 1], [2, 3]]), json!([[4, 5], [6, 7]])]
    );
}

#[test]
fn batch_works_for_strings_and_bytes() {
    let def = DatasetDef::from_strings(vec!["a", "", "ccc"]).batch(2, false);
    assert_eq!(json(&def), vec![json!(["a", ""]), json!(["ccc"])]);
    let out = run(&DatasetDef::from_bytes(vec![vec![1], vec![2, 3]]).batch(2, false));
    let t = &out[0].as_ref().expect("ok").components[0];
    assert_eq!((t.dtype(), t.shape()), (DType::Bytes, &[2][..]));
    let items: Vec<Vec<u8>> = t.items().expect("items").iter().map(|b| b.to_vec()).collect();
    assert_eq!(items, vec![vec![1], vec![2, 3]]);
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

#[test]
fn shuffle_is_a_seeded_permutation() {
    let a = ints(&DatasetDef::range(10).shuffle(4, 7));
    assert_eq!(sorted(a.clone()), (0..10).collect::<Vec<_>>());
    assert_eq!(ints(&DatasetDef::range(10).shuffle(4, 7)), a, "same seed, same order");
    assert_ne!(ints(&DatasetDef::range(10).shuffle(4, 8)), a, "another seed, another order");
    assert_ne!(a, (0..10).collect::<Vec<_>>(), "seed 7 does shuffle");
}

/// Pins the exact orders: ChaCha8 and the buffer algorithm are fixed, so a change
/// here means every user's shuffled datasets change too.
#[test]
fn shuffle_orders_are_pinned() {
    assert_eq!(ints(&DatasetDef::range(10).shuffle(4, 7)), vec![2, 1, 0, 3, 5, 4, 8, 7, 9, 6]);
    assert_eq!(
        ints(&DatasetDef::range(6).shuffle(6, 0).repeat(2)),
        vec![4, 2, 0, 5, 1, 3, 5, 2, 1, 4, 3, 0]
    );
}

#[test]
fn shuffle_buffer_bounds_how_far_elements_move_forward() {
    // With a buffer of b, output i is one of inputs 0..i+b.
    let out = ints(&DatasetDef::range(100).shuffle(3, 1));
    for (i, v) in out.iter().enumerate() {
        assert!((*v as usize) < i + 3, "output {i} is {v}");
    }
    assert_eq!(ints(&DatasetDef::range(5).shuffle(1, 1)), vec![0, 1, 2, 3, 4]);
}

#[test]
fn shuffle_reshuffles_each_epoch_deterministically() {
    let def = DatasetDef::range(20).shuffle(20, 3).repeat(2);
    let out = ints(&def);
    let (first, second) = out.split_at(20);
    assert_eq!(sorted(first.to_vec()), (0..20).collect::<Vec<_>>());
    assert_eq!(sorted(second.to_vec()), (0..20).collect::<Vec<_>>());
    assert_ne!(first, second, "each epoch has its own order");
    assert_eq!(ints(&def), out, "and the whole run is reproducible");
}

#[test]
fn repeat_gives_copies() {
    assert_eq!(ints(&DatasetDef::range(3).repeat(3)), vec![0, 1, 2, 0, 1, 2, 0, 1, 2]);
    assert_eq!(ints(&DatasetDef::range(3).repeat(0)), Vec::<i64>::new());
    assert_eq!(ints(&DatasetDef::range(2).repeat(2).repeat(2)), vec![0, 1, 0, 1, 0, 1, 0, 1]);
}

#[test]
fn repeat_forever_with_take() {
    assert_eq!(ints(&DatasetDef::range(3).repeat_forever().take(7)), vec![0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn repeat_forever_of_an_empty_input_ends() {
    assert_eq!(ints(&DatasetDef::range(0).repeat_forever()), Vec::<i64>::new());
    let all_filtered = DatasetDef::range(5).filter_with("lt", vec![Arg::Int(0)]).repeat_forever();
    assert_eq!(ints(&all_filtered), Vec::<i64>::new());
}

#[test]
fn filter_mod_eq_keeps_the_evens() {
    let def = DatasetDef::range(10).filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(0)]);
    assert_eq!(ints(&def), vec![0, 2, 4, 6, 8]);
}

#[test]
fn take_and_skip() {
    assert_eq!(ints(&DatasetDef::range(10).take(3)), vec![0, 1, 2]);
    assert_eq!(ints(&DatasetDef::range(10).skip(7)), vec![7, 8, 9]);
    assert_eq!(ints(&DatasetDef::range(10).skip(2).take(2)), vec![2, 3]);
    assert_eq!(ints(&DatasetDef::range(3).take(10)), vec![0, 1, 2]);
    assert_eq!(ints(&DatasetDef::range(3).skip(10)), Vec::<i64>::new());
    assert_eq!(ints(&DatasetDef::range(3).take(0)), Vec::<i64>::new());
}

#[test]
fn a_long_pipeline_composes() {
    // range(20) → +1 → keep evens → batch 3 (drop) → take 2
    let def = DatasetDef::range(20)
        .map_with("add", vec![Arg::Int(1)])
        .filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(0)])
        .batch(3, true)
        .take(2)
        .prefetch(2);
    assert_eq!(json(&def), vec![json!([2, 4, 6]), json!([8, 10, 12])]);
}

#[test]
fn a_bytes_slice_is_built_once_and_every_element_shares_its_buffer() {
    // A large constant tensor must cost no copy per element or per epoch: every
    // element (here 3 epochs × 2 values) refers to the buffer built for its value.
    let def = DatasetDef::from_bytes(vec![vec![7u8; 4096], vec![8u8; 4096]]).repeat(3);
    let out: Vec<_> = run(&def).into_iter().map(|e| e.expect("element")).collect();
    assert_eq!(out.len(), 6);
    let buffer = |i: usize| out[i].components[0].data().as_ptr();
    for epoch in 1..3 {
        assert_eq!(buffer(2 * epoch), buffer(0), "epoch {epoch}, value 0: same buffer");
        assert_eq!(buffer(2 * epoch + 1), buffer(1), "epoch {epoch}, value 1: same buffer");
    }
    assert_ne!(buffer(0), buffer(1));
    assert_eq!(out[3].components[0].data()[4..], [8u8; 4096][..], "the bytes themselves");
}
