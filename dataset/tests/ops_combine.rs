//! `zip`, `concatenate`, `enumerate`, `shard` against hand-computed values, and the
//! JSON form of each.

mod common;
mod ops_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::{ints, json, run, run_with};
use ops_support::{int_arg, int_of, values};
use serde_json::json;
use sluice_dataset::{Arg, DatasetDef, DatasetError, Element, FunctionRegistry, ShardArg};

/// The built-ins plus `name_as(s)`: names the element's single component `s`,
/// and `fail_at(k)`: identity, but an error on `k`.
fn registry() -> FunctionRegistry {
    let mut r = FunctionRegistry::builtin();
    // Like a real stage, every element of one call shares one name list.
    let shared: Mutex<BTreeMap<String, Arc<[String]>>> = Mutex::default();
    r.register_map("name_as", 1, move |e, args| {
        let [Arg::Str(name)] = args else {
            return Err(format!("expected a name, got {args:?}"));
        };
        let names = shared
            .lock()
            .map_err(|e| e.to_string())?
            .entry(name.clone())
            .or_insert_with(|| Arc::from(vec![name.clone()]))
            .clone();
        Element::named(names, e.components).map_err(|e| e.to_string())
    });
    r.register_map("fail_at", 1, |e, args| {
        if int_of(&e)? == int_arg(args)? {
            return Err("broke".into());
        }
        Ok(e)
    });
    r
}

fn named(def: DatasetDef, name: &str) -> DatasetDef {
    def.map_with("name_as", vec![Arg::Str(name.into())])
}

fn names(items: &[Result<Element, DatasetError>]) -> Vec<Option<Vec<String>>> {
    items.iter().map(|r| r.as_ref().expect("ok").names.as_deref().map(<[String]>::to_vec)).collect()
}

fn strings(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn zip_pairs_elements_and_ends_with_the_shortest_side() {
    let def = DatasetDef::range(5)
        .zip(vec![DatasetDef::range_with(10, 13, 1), DatasetDef::range(4).map("square")]);
    assert_eq!(json(&def), vec![json!([0, 10, 0]), json!([1, 11, 1]), json!([2, 12, 4])]);
    let shorter_input = DatasetDef::range(2).zip(vec![DatasetDef::range(100)]);
    assert_eq!(json(&shorter_input), vec![json!([0, 0]), json!([1, 1])]);
    // Each side keeps its own stages, components concatenated in order.
    let batched =
        DatasetDef::range(4).batch(2, false).zip(vec![DatasetDef::from_strings(vec!["a", "b"])]);
    assert_eq!(json(&batched), vec![json!([[0, 1], "a"]), json!([[2, 3], "b"])]);
}

#[test]
fn zip_keeps_names_only_when_every_side_is_named_and_they_are_distinct() {
    let r = registry();
    let both = named(DatasetDef::range(2), "x").zip(vec![named(DatasetDef::range(2), "y")]);
    let out = run_with(&both, &r);
    assert_eq!(names(&out), vec![strings(&["x", "y"]), strings(&["x", "y"])]);
    let y = out[1].as_ref().expect("ok").get("y").expect("named y").as_i64().expect("int");
    assert_eq!(y, 1);
    // The name list is shared between elements, not rebuilt for each.
    let (a, b) = (out[0].as_ref().expect("ok"), out[1].as_ref().expect("ok"));
    assert!(Arc::ptr_eq(a.names.as_ref().expect("names"), b.names.as_ref().expect("names")));

    let one_plain = named(DatasetDef::range(2), "x").zip(vec![DatasetDef::range(2)]);
    assert_eq!(names(&run_with(&one_plain, &r)), vec![None, None]);
    let clash = named(DatasetDef::range(2), "x").zip(vec![named(DatasetDef::range(2), "x")]);
    assert_eq!(names(&run_with(&clash, &r)), vec![None, None]);
}

#[test]
fn zip_yields_an_error_of_either_side_and_ends() {
    let r = registry();
    let input_fails = DatasetDef::range(5).map_with("fail_at", vec![Arg::Int(2)]);
    let out = values(&run_with(&input_fails.zip(vec![DatasetDef::range(5)]), &r));
    assert_eq!(out.len(), 3);
    assert!(out[2].is_err());
    let other_fails = DatasetDef::range(5).map_with("fail_at", vec![Arg::Int(1)]);
    let out = run_with(&DatasetDef::range(5).zip(vec![other_fails]), &r);
    assert_eq!(out.len(), 2);
    assert!(matches!(&out[1], Err(DatasetError::Function { name, .. }) if name == "fail_at"));
}

#[test]
fn concatenate_continues_with_the_second_pipeline() {
    let def = DatasetDef::range(3).concatenate(DatasetDef::range_with(10, 12, 1).map("square"));
    assert_eq!(ints(&def), vec![0, 1, 2, 100, 121]);
    let empty_first = DatasetDef::range(0).concatenate(DatasetDef::range(2));
    assert_eq!(ints(&empty_first), vec![0, 1]);
    let chained = DatasetDef::range(1)
        .concatenate(DatasetDef::range_with(5, 6, 1))
        .concatenate(DatasetDef::range(2))
        .repeat(2);
    assert_eq!(ints(&chained), vec![0, 5, 0, 1, 0, 5, 0, 1]);
}

#[test]
fn concatenate_reaches_the_second_pipeline_only_after_the_first() {
    let r = registry();
    // The second side fails on its first element: never reached by a take of 3.
    let bad = DatasetDef::range(3).map_with("fail_at", vec![Arg::Int(0)]);
    let def = DatasetDef::range(3).concatenate(bad.clone()).take(3);
    assert_eq!(values(&run_with(&def, &r)), vec![Ok(0), Ok(1), Ok(2)]);
    let out = values(&run_with(&DatasetDef::range(3).concatenate(bad), &r));
    assert_eq!(out.len(), 4);
    assert!(out[3].is_err());
    // An error in the first side ends the stage before the second starts.
    let first_fails = DatasetDef::range(3).map_with("fail_at", vec![Arg::Int(1)]);
    let out = values(&run_with(&first_fails.concatenate(DatasetDef::range(5)), &r));
    assert_eq!(out.len(), 2);
    assert!(out[1].is_err());
}

#[test]
fn enumerate_prepends_a_counter() {
    let def = DatasetDef::range_with(10, 13, 1).enumerate(5);
    assert_eq!(json(&def), vec![json!([5, 10]), json!([6, 11]), json!([7, 12])]);
    let from_zero = DatasetDef::from_strings(vec!["a", "b"]).enumerate(0);
    assert_eq!(json(&from_zero), vec![json!([0, "a"]), json!([1, "b"])]);
    // The counter restarts with each epoch of an input that is repeated after it…
    let per_epoch = DatasetDef::range(2).enumerate(0).repeat(2);
    assert_eq!(json(&per_epoch), vec![json!([0, 0]), json!([1, 1]), json!([0, 0]), json!([1, 1])]);
    // …and keeps counting when the repeat comes first.
    let across = DatasetDef::range(2).repeat(2).enumerate(0);
    let firsts: Vec<serde_json::Value> = json(&across).into_iter().map(|v| v[0].clone()).collect();
    assert_eq!(firsts, vec![json!(0), json!(1), json!(2), json!(3)]);
}

#[test]
fn enumerate_names_the_counter_index_for_named_inputs() {
    let r = registry();
    let out = run_with(&named(DatasetDef::range(2), "x").enumerate(0), &r);
    assert_eq!(names(&out), vec![strings(&["index", "x"]), strings(&["index", "x"])]);
    let e = out[1].as_ref().expect("ok");
    assert_eq!(e.to_json(), json!({"index": 1, "x": 1}));
    let clash = run_with(&named(DatasetDef::range(1), "index").enumerate(0), &r);
    assert_eq!(names(&clash), vec![None]);
}

#[test]
fn enumerate_fails_instead_of_wrapping_around() {
    let out = run(&DatasetDef::range(3).enumerate(i64::MAX));
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].as_ref().expect("ok").to_json(), json!([i64::MAX, 0]));
    assert!(matches!(&out[1], Err(DatasetError::Unsupported(m)) if m.contains("overflow")));
}

#[test]
fn shard_keeps_every_nth_element() {
    let shard = |n, i| DatasetDef::range(10).shard(ShardArg::Value(n), ShardArg::Value(i));
    assert_eq!(ints(&shard(3, 0)), vec![0, 3, 6, 9]);
    assert_eq!(ints(&shard(3, 1)), vec![1, 4, 7]);
    assert_eq!(ints(&shard(3, 2)), vec![2, 5, 8]);
    assert_eq!(ints(&shard(1, 0)), (0..10).collect::<Vec<_>>());
    assert_eq!(ints(&shard(20, 19)), Vec::<i64>::new());
    // Outside HINT sharding the placeholder means a single shard.
    let hint = DatasetDef::range(4).shard(ShardArg::Hint, ShardArg::Hint);
    assert_eq!(ints(&hint), vec![0, 1, 2, 3]);
    // After a batch, positions count batches.
    let batches =
        DatasetDef::range(8).batch(2, false).shard(ShardArg::Value(2), ShardArg::Value(1));
    assert_eq!(json(&batches), vec![json!([2, 3]), json!([6, 7])]);
}

#[test]
fn shard_yields_an_error_even_at_a_skipped_position() {
    let r = registry();
    let def = DatasetDef::range(10)
        .map_with("fail_at", vec![Arg::Int(2)])
        .shard(ShardArg::Value(3), ShardArg::Value(0));
    let out = values(&run_with(&def, &r));
    assert_eq!(out.len(), 2);
    assert_eq!(out[0], Ok(0));
    assert!(out[1].is_err());
}

#[test]
fn the_json_form_of_each_combining_stage_parses_and_runs() {
    let cases = [
        (
            r#"{"stages": [{"range": {"stop": 3}},
                {"zip": {"datasets": [{"stages": [{"range": {"start": 10, "stop": 20}}]}]}}]}"#,
            vec![json!([0, 10]), json!([1, 11]), json!([2, 12])],
        ),
        (
            r#"{"stages": [{"range": {"stop": 2}},
                {"concatenate": {"dataset": {"stages": [{"from_tensor_slices": {"ints": [7]}}]}}}]}"#,
            vec![json!(0), json!(1), json!(7)],
        ),
        (
            r#"{"stages": [{"range": {"stop": 2}}, {"enumerate": {"start": 100}}]}"#,
            vec![json!([100, 0]), json!([101, 1])],
        ),
        (
            r#"{"stages": [{"range": {"stop": 2}}, {"enumerate": {}}]}"#,
            vec![json!([0, 0]), json!([1, 1])],
        ),
        (
            r#"{"stages": [{"range": {"stop": 7}}, {"shard": {"num_shards": 3, "index": 2}}]}"#,
            vec![json!(2), json!(5)],
        ),
        (
            r#"{"stages": [{"range": {"stop": 2}},
                {"shard": {"num_shards": "SHARD_HINT", "index": "SHARD_HINT"}}]}"#,
            vec![json!(0), json!(1)],
        ),
    ];
    for (text, want) in cases {
        let def = DatasetDef::from_json(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(DatasetDef::from_json(&def.to_json()).expect("round trip"), def);
        assert_eq!(json(&def), want, "{text}");
    }
}
