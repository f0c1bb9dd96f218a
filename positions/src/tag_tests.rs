use prost::Message;

use super::*;
use crate::wire::{join_positions, split_positions};

/// A few tags of every shape: inline records, consecutive records, a boxed
/// origin of runs that do not touch, one with unit ends, an empty one.
fn shapes() -> Vec<Tag> {
    let mut ends = Origin::record(9, 0);
    ends.push_end(9, 1);
    vec![
        Tag::record(3, 0),
        Tag::Run(Run { unit: 4, first: 2, count: 5 }),
        Tag::from(Origin { runs: vec![Run::record(1, 0), Run::record(7, 3)], unit_ends: vec![] }),
        Tag::from(ends),
        Tag::from(Origin::default()),
        Tag::record(u64::MAX - 1, 1 << 40),
    ]
}

/// A deterministic stream of small numbers (no randomness in tests).
fn numbers(seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed;
    std::iter::repeat_with(move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x >> 33
    })
}

#[test]
fn one_run_is_inline_and_anything_more_is_boxed() {
    assert_eq!(Tag::from(Origin::record(5, 2)), Tag::record(5, 2));
    let mut ended = Origin::record(5, 2);
    ended.push_end(5, 3);
    assert!(matches!(Tag::from(ended.clone()), Tag::Origin(_)), "a unit end is boxed");
    assert_eq!(Tag::from(ended.clone()).into_origin(), ended);
    assert!(Tag::from(Origin::default()).is_empty());
    for tag in shapes() {
        let origin = tag.clone().into_origin();
        assert_eq!(tag.runs(), origin.runs.as_slice());
        assert_eq!(tag.unit_ends(), origin.unit_ends.as_slice());
        assert_eq!(Tag::from(origin.clone()).into_origin(), origin, "round trip of {tag:?}");
        assert_eq!(tag.to_pb(), origin.to_pb(), "the wire form of {tag:?}");
    }
}

#[test]
fn consecutive_records_stay_one_inline_run() {
    let mut tag = Tag::record(4, 0);
    for k in 1..32 {
        tag.append(Tag::record(4, k));
    }
    assert_eq!(
        tag,
        Tag::Run(Run { unit: 4, first: 0, count: 32 }),
        "a batch of one unit's records"
    );
    tag.append(Tag::from(Origin::default()));
    assert!(matches!(tag, Tag::Run(_)), "appending nothing keeps it inline");
    tag.append(Tag::record(5, 0));
    assert_eq!(tag.runs(), &[Run { unit: 4, first: 0, count: 32 }, Run::record(5, 0)]);
}

#[test]
fn appending_tags_gives_what_appending_origins_gives() {
    // Batches of every mix of shapes, and of runs that touch or not.
    for seed in 0..200 {
        let mut n = numbers(seed);
        let parts: Vec<Tag> = (0..1 + n.next().unwrap() % 8)
            .map(|_| match n.next().unwrap() % 4 {
                0 => shapes().swap_remove((n.next().unwrap() % 6) as usize),
                _ => Tag::record(n.next().unwrap() % 3, n.next().unwrap() % 4),
            })
            .collect();
        let mut want = Origin::default();
        for p in &parts {
            want.append(p.clone().into_origin());
        }
        let mut tag = parts[0].clone();
        for p in &parts[1..] {
            tag.append(p.clone());
        }
        assert_eq!(tag.clone().into_origin(), want, "{parts:?}");
        let inline = want.runs.len() == 1 && want.unit_ends.is_empty();
        if parts.iter().all(|p| matches!(p, Tag::Run(_))) {
            assert_eq!(
                matches!(tag, Tag::Run(_)),
                inline,
                "inline exactly when one run: {parts:?}"
            );
        }
        // Moved into an origin (the dropped sink), and an origin into a tag
        // (dropped records joining the next element).
        let mut sink = Origin::default();
        for p in parts.iter().cloned() {
            p.append_to(&mut sink);
        }
        assert_eq!(sink, want);
        let mut joined = Tag::record(100, 0);
        joined.append_origin(want.clone());
        let mut expect = Origin::record(100, 0);
        expect.append(want);
        assert_eq!(joined.into_origin(), expect);
    }
}

#[test]
fn columns_are_what_join_positions_writes_and_split_back() {
    let mut tags: Vec<Option<Tag>> = shapes().into_iter().map(Some).collect();
    tags.insert(2, None);
    let mut message = Origin::record(11, 4);
    message.push_end(11, 5);
    let mut columns = PositionColumns::with_capacity(tags.len());
    for t in &tags {
        columns.push(t.as_ref());
    }
    let p = columns.finish(message.clone());
    let origins: Vec<Origin> =
        tags.iter().map(|t| t.clone().map(Tag::into_origin).unwrap_or_default()).collect();
    assert_eq!(p, join_positions(origins.clone(), message.clone()));
    let (per, own) = split_positions(&p, tags.len()).expect("well formed");
    assert_eq!(per.len(), origins.len());
    for (i, want) in origins.iter().enumerate() {
        assert_eq!(per.runs_of(i), want.runs);
    }
    assert_eq!(own.runs, message.runs);
    let ends: Vec<(u64, u64)> =
        origins.iter().chain([&message]).flat_map(|o| o.unit_ends.clone()).collect();
    assert_eq!(own.unit_ends, ends, "unit ends travel with the message, in element order");
}

#[test]
fn wire_len_is_what_a_tag_adds_to_the_encoded_columns() {
    let empty = PositionColumns::default().finish(Origin::default());
    for tag in shapes() {
        let mut columns = PositionColumns::default();
        columns.push(Some(&tag));
        let p = columns.finish(Origin::default());
        // Each non-empty packed column adds a key and a length prefix once.
        let framing: usize =
            [p.runs.len(), p.unit_ends.len()].iter().filter(|n| **n > 0).map(|_| 2).sum();
        assert_eq!(p.encoded_len(), empty.encoded_len() + tag.wire_len() + framing, "{tag:?}");
    }
}
