//! Pipelines that must be refused before running, and functions failing mid-stream.

mod common;

use common::run_with;
use sluice_dataset::{Arg, DatasetDef, DatasetError, FunctionRegistry};

fn start_err(def: &DatasetDef) -> DatasetError {
    match def.iter_local(&FunctionRegistry::builtin()) {
        Err(e) => e,
        Ok(_) => panic!("expected {def:?} to be refused"),
    }
}

#[test]
fn unknown_function_is_named_with_the_known_ones() {
    let e = start_err(&DatasetDef::range(3).map("cube"));
    let msg = e.to_string();
    assert!(matches!(&e, DatasetError::UnknownFunction { name, .. } if name == "cube"), "{e:?}");
    assert!(msg.contains("`cube`") && msg.contains("square"), "{msg}");
    let e = start_err(&DatasetDef::range(3).filter("square"));
    assert!(matches!(&e, DatasetError::UnknownFunction { kind, .. } if kind == "filter"), "{e:?}");
}

#[test]
fn wrong_arity_says_expected_and_got() {
    let e = start_err(&DatasetDef::range(3).map("add"));
    assert!(matches!(&e, DatasetError::BadArguments { name, .. } if name == "add"), "{e:?}");
    assert!(e.to_string().contains("expected 1 argument, got 0"), "{e}");
    let e = start_err(&DatasetDef::range(3).map_with("square", vec![Arg::Int(1)]));
    assert!(e.to_string().contains("expected 0 arguments, got 1"), "{e}");
}

#[test]
fn invalid_structure_is_refused_before_running() {
    let e = start_err(&DatasetDef { stages: vec![] });
    assert!(matches!(e, DatasetError::InvalidSpec { ref field, .. } if field == "stages"));
    let e = start_err(&DatasetDef::range(3).batch(0, false));
    assert!(
        matches!(e, DatasetError::InvalidSpec { ref field, .. } if field == "stages[1].batch.size")
    );
}

#[test]
fn a_function_error_is_yielded_once_then_the_stream_ends() {
    let mut registry = FunctionRegistry::builtin();
    registry.register_map("fail_at_2", 0, |e, _| match e.as_i64() {
        Ok(2) => Err("two is not allowed".to_string()),
        _ => Ok(e),
    });
    let def = DatasetDef::range(10).map("fail_at_2").map("square");
    let out = run_with(&def, &registry);
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[1].as_ref().map(|e| e.as_i64().ok()).ok().flatten(), Some(1));
    match &out[2] {
        Err(DatasetError::Function { name, message }) => {
            assert_eq!(name, "fail_at_2");
            assert_eq!(message, "two is not allowed");
        }
        other => panic!("expected a function error, got {other:?}"),
    }
}

#[test]
fn errors_end_the_stream_through_batch_shuffle_and_repeat() {
    let def = DatasetDef::range(10)
        .map_with("add", vec![Arg::Float(0.5)])
        .batch(2, false)
        .shuffle(3, 1)
        .repeat_forever();
    let out = run_with(&def, &FunctionRegistry::builtin());
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(matches!(&out[0], Err(DatasetError::Function { name, .. }) if name == "add"));
}

#[test]
fn batch_of_mismatched_shapes_is_an_error() {
    let mut registry = FunctionRegistry::builtin();
    // Element i becomes a vector of length i.
    registry.register_map("iota", 0, |e, _| {
        let n = e.as_i64().map_err(|e| e.to_string())?;
        let values: Vec<i64> = (0..n).collect();
        let t = sluice_dataset::Tensor::from_i64s(vec![values.len() as u64], &values)
            .map_err(|e| e.to_string())?;
        Ok(sluice_dataset::Element::single(t))
    });
    let out = run_with(&DatasetDef::range(4).map("iota").batch(2, false), &registry);
    assert_eq!(out.len(), 1, "{out:?}");
    let msg = out[0].as_ref().expect_err("mismatch").to_string();
    assert!(msg.contains("int64[0]") && msg.contains("int64[1]"), "{msg}");
}

#[test]
fn a_panicking_function_becomes_a_function_error() {
    let mut registry = FunctionRegistry::builtin();
    registry.register_map("boom", 0, |_, _| panic!("kaboom"));
    registry.register_filter("boom_filter", 0, |_, _| panic!("{}", String::from("filter kaboom")));
    let out = run_with(&DatasetDef::range(3).map("boom"), &registry);
    assert_eq!(out.len(), 1, "{out:?}");
    let msg = out[0].as_ref().expect_err("panic").to_string();
    assert!(msg.contains("`boom`") && msg.contains("panicked: kaboom"), "{msg}");
    let out = run_with(&DatasetDef::range(3).filter("boom_filter"), &registry);
    let msg = out[0].as_ref().expect_err("panic").to_string();
    assert!(msg.contains("panicked: filter kaboom"), "{msg}");
}

/// `range(10)` followed by `n` stages `take(10)`.
fn takes(n: usize) -> DatasetDef {
    (0..n).fold(DatasetDef::range(10), |d, _| d.take(10))
}

#[test]
fn a_pipeline_of_too_many_stages_is_refused_naming_the_bound() {
    // The attack that aborted a worker: 20,000 stages overflowed its stack.
    for n in [sluice_dataset::MAX_STAGES, 20_000] {
        let e = takes(n).validate().expect_err("refused");
        let msg = e.to_string();
        assert!(msg.contains(&format!("more than {} stages", sluice_dataset::MAX_STAGES)), "{msg}");
        assert!(matches!(start_err(&takes(n)), DatasetError::InvalidSpec { .. }));
    }
    // The same through the JSON form the dispatcher and the workers parse.
    let json = takes(20_000).to_json_compact();
    let e = DatasetDef::from_json(&json).expect_err("refused");
    assert!(e.to_string().contains("more than 256 stages"), "{e}");
}

#[test]
fn a_pipeline_at_the_stage_bound_runs_on_a_default_thread_stack() {
    // A mix of the per-element stages, so the frames are those of real pipelines.
    let def = (0..sluice_dataset::MAX_STAGES - 1).fold(DatasetDef::range(10), |d, i| match i % 4 {
        0 => d.take(10),
        1 => d.map("identity"),
        2 => d.skip(0),
        _ => d.filter_with("mod_eq", vec![Arg::Int(1), Arg::Int(0)]),
    });
    def.validate().expect("at the bound");
    // A pipeline thread has the default 2 MiB stack: a spawned thread has the same.
    let got = std::thread::spawn(move || {
        let iter = def.iter_local(&FunctionRegistry::builtin()).expect("starts");
        iter.map(|e| e.expect("element").components[0].as_i64().expect("int64")).collect::<Vec<_>>()
    })
    .join()
    .expect("no stack overflow");
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[test]
fn nested_pipelines_count_towards_the_bound_and_nest_at_most_max_nesting_deep() {
    // Zips nested one inside the other.
    let nested = |levels: usize| {
        (0..levels).fold(DatasetDef::range(3), |inner, _| DatasetDef::range(3).zip(vec![inner]))
    };
    nested(sluice_dataset::MAX_NESTING).validate().expect("at the bound");
    let e = nested(sluice_dataset::MAX_NESTING + 1).validate().expect_err("refused");
    assert!(e.to_string().contains("nest more than 8 levels"), "{e}");
    // Stages inside a zip count: 2 zipped pipelines of 128 stages each are too many.
    let half = takes(127);
    let e = DatasetDef::range(3).zip(vec![half.clone(), half]).validate().expect_err("refused");
    assert!(e.to_string().contains("more than 256 stages"), "{e}");
}
