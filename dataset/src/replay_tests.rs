use sluice_positions::UnitRecords;

use crate::def::{DatasetDef, ShardArg};
use crate::python::{PyFunction, PyOp, PythonStage};

fn python(op: PyOp) -> PythonStage {
    PythonStage::new(op, PyFunction::Ref("m:f".into()), "3.12")
}

fn files() -> DatasetDef {
    DatasetDef::list_files("/data/*.txt")
}

#[test]
fn one_element_units_with_one_to_one_and_dropping_stages_are_replayable() {
    let def = DatasetDef::range(10)
        .map("square")
        .filter("is_even")
        .parallel_map("square", vec![], 4)
        .python(python(PyOp::Map))
        .python(python(PyOp::Filter))
        .ignore_errors()
        .shuffle(8, 1)
        .batch(3, true)
        .prefetch(2);
    assert_eq!(def.exactly_once(), Ok(UnitRecords::One));
    assert_eq!(DatasetDef::from_ints(vec![1, 2]).exactly_once(), Ok(UnitRecords::One));
    assert_eq!(files().exactly_once(), Ok(UnitRecords::One));
}

#[test]
fn file_sources_and_one_expansion_have_counted_units() {
    assert_eq!(
        DatasetDef::tfrecord(vec!["a"]).batch(2, false).exactly_once(),
        Ok(UnitRecords::Counted)
    );
    assert_eq!(DatasetDef::text_lines(vec!["a"]).exactly_once(), Ok(UnitRecords::Counted));
    let def =
        files().filter("is_even").flat_map("text_lines", vec![]).shuffle(4, 0).batch(2, false);
    assert_eq!(def.exactly_once(), Ok(UnitRecords::Counted));
    assert_eq!(files().interleave("tfrecord", 4, 2).exactly_once(), Ok(UnitRecords::Counted));
}

/// The refusal names `stages[i].op`.
fn refused(def: DatasetDef, at: &str, says: &str) {
    let err = def.exactly_once().expect_err("not replayable");
    assert!(err.starts_with(at), "`{err}` should name {at}");
    assert!(err.contains(says), "`{err}` should say {says}");
}

#[test]
fn counting_restarting_and_combining_stages_are_refused_by_name() {
    refused(DatasetDef::range(4).map("square").repeat(2), "stages[2].repeat", "repetitions");
    refused(DatasetDef::range(4).take(2), "stages[1].take", "remove it");
    refused(DatasetDef::range(4).skip(2), "stages[1].skip", "remove it");
    refused(DatasetDef::range(4).enumerate(0), "stages[1].enumerate", "remove it");
    let shard = DatasetDef::range(4).shard(ShardArg::Value(2), ShardArg::Value(0));
    refused(shard, "stages[1].shard", "remove it");
    refused(
        DatasetDef::range(4).zip(vec![DatasetDef::range(4)]),
        "stages[1].zip",
        "another pipeline",
    );
    refused(
        DatasetDef::range(4).concatenate(DatasetDef::range(2)),
        "stages[1].concatenate",
        "another pipeline",
    );
}

#[test]
fn expansions_must_be_single_over_whole_one_element_units() {
    let twice = files().flat_map("text_lines", vec![]).flat_map("text_lines", vec![]);
    refused(twice, "stages[2].flat_map", "second");
    refused(
        DatasetDef::text_lines(vec!["a"]).flat_map("text_lines", vec![]),
        "stages[1].flat_map",
        "list_files",
    );
    refused(
        files().batch(2, false).interleave("tfrecord", 2, 1),
        "stages[2].interleave",
        "stages[1].batch",
    );
    refused(
        files().shuffle(2, 0).flat_map("tfrecord", vec![]),
        "stages[2].flat_map",
        "stages[1].shuffle",
    );
}

#[test]
fn python_stages_that_change_the_element_count_are_refused() {
    refused(DatasetDef::range(4).python(python(PyOp::FlatMap)), "stages[1].python", "flat_map");
    refused(
        DatasetDef::range(4).python(python(PyOp::MapBatches)),
        "stages[1].python",
        "map_batches",
    );
}

#[test]
fn deterministic_order_refuses_stages_that_mix_splits_or_reorder() {
    let ok = DatasetDef::range(10).map("square").filter("is_even").prefetch(2);
    assert_eq!(ok.deterministic_order(), Ok(()));
    assert_eq!(files().flat_map("text_lines", vec![]).deterministic_order(), Ok(()));
    let cases = [
        (DatasetDef::range(10).shuffle(8, 1), "stages[1].shuffle", "mixes"),
        (DatasetDef::range(10).map("square").batch(2, false), "stages[2].batch", "mixes"),
        (files().interleave("tfrecord", 4, 2), "stages[1].interleave", "cycle_length"),
    ];
    for (def, at, says) in cases {
        let err = def.deterministic_order().expect_err("refused");
        assert!(err.starts_with(at) && err.contains(says), "`{err}` should name {at}");
    }
}
