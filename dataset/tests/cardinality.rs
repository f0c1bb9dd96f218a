//! `DatasetDef::cardinality`: what the stages alone say about the element count.

use sluice_dataset::{Arg, Cardinality, DatasetDef, FnCall, Stage};

#[test]
fn sources_are_finite_and_repeat_forever_makes_them_infinite() {
    assert_eq!(DatasetDef::range(10).cardinality(), Cardinality::Finite(10));
    assert!(DatasetDef::range(10).is_known_finite());
    assert!(!DatasetDef::range(10).is_infinite());
    assert_eq!(DatasetDef::range(10).repeat(3).cardinality(), Cardinality::Finite(30));
    assert!(DatasetDef::range(10).repeat_forever().is_infinite());
    assert!(DatasetDef::range(10).repeat_forever().map("square").batch(4, false).is_infinite());
    // Records per file are not in the definition.
    assert_eq!(DatasetDef::tfrecord(vec!["a"]).cardinality(), Cardinality::Unknown);
    assert!(DatasetDef::tfrecord(vec!["a"]).repeat_forever().is_infinite());
}

#[test]
fn take_ends_an_infinite_pipeline_and_empty_stays_empty() {
    let forever = DatasetDef::range(10).repeat_forever();
    assert_eq!(forever.clone().take(5).cardinality(), Cardinality::Finite(5));
    assert!(forever.clone().skip(5).is_infinite());
    assert_eq!(DatasetDef::range(0).repeat_forever().cardinality(), Cardinality::Finite(0));
    assert_eq!(DatasetDef::range(10).repeat(0).cardinality(), Cardinality::Finite(0));
    assert_eq!(DatasetDef::range(10).take(3).skip(1).cardinality(), Cardinality::Finite(2));
    assert_eq!(DatasetDef::range(10).batch(4, true).cardinality(), Cardinality::Finite(2));
    assert_eq!(DatasetDef::range(10).batch(4, false).cardinality(), Cardinality::Finite(3));
    // A filter keeps infiniteness but loses the count.
    assert!(forever.clone().filter("is_even").is_infinite());
    assert_eq!(DatasetDef::range(10).filter("is_even").cardinality(), Cardinality::Unknown);
}

#[test]
fn zip_ends_with_the_shortest_and_concatenate_with_the_longest() {
    let forever = DatasetDef::range(10).repeat_forever();
    assert_eq!(
        forever.clone().zip(vec![DatasetDef::range(4)]).cardinality(),
        Cardinality::Finite(4)
    );
    assert!(forever.clone().zip(vec![forever.clone()]).is_infinite());
    assert!(DatasetDef::range(3).concatenate(forever.clone()).is_infinite());
    assert_eq!(
        DatasetDef::range(3).concatenate(DatasetDef::range(4)).cardinality(),
        Cardinality::Finite(7)
    );
}

#[test]
fn flat_map_over_a_finite_input_is_unknown() {
    let def = DatasetDef::from_strings(vec!["a"]).flat_map("tfrecord", vec![]);
    assert_eq!(def.cardinality(), Cardinality::Unknown);
    assert!(!def.is_known_finite() && !def.is_infinite());
    let mut forever = DatasetDef::from_strings(vec!["a"]).repeat_forever();
    forever.stages.push(Stage::FlatMap(FnCall::new("tfrecord", vec![Arg::Int(1)])));
    assert!(forever.is_infinite());
}
