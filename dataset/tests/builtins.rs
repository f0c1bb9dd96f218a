//! The built-in map and filter functions, run through real pipelines.

mod common;

use common::{ints, json, run_with};
use serde_json::json;
use sluice_dataset::{Arg, DType, DatasetDef, DatasetError, Element, FunctionRegistry, Tensor};

/// The built-ins plus `tuple`, which turns x into (x, [x, x] as float64) so that
/// maps can be checked on several components, dtypes and shapes at once.
fn registry() -> FunctionRegistry {
    let mut r = FunctionRegistry::builtin();
    r.register_map("tuple", 0, |e, _| {
        let x = e.as_i64().map_err(|e| e.to_string())?;
        let v = Tensor::from_f64s(vec![2], &[x as f64, x as f64]).map_err(|e| e.to_string())?;
        Ok(Element::new(vec![Tensor::scalar_i64(x), v]))
    });
    r
}

fn values(def: &DatasetDef) -> Vec<serde_json::Value> {
    run_with(def, &registry()).into_iter().map(|r| r.expect("no error").to_json()).collect()
}

/// The message of the one function error `def` ends with.
fn failure(def: &DatasetDef) -> (String, String) {
    let out = run_with(def, &registry());
    match out.last() {
        Some(Err(DatasetError::Function { name, message })) => (name.clone(), message.clone()),
        other => panic!("expected a function error, got {other:?}"),
    }
}

#[test]
fn maps_apply_to_every_component() {
    let def = DatasetDef::range_with(2, 4, 1).map("tuple").map("square");
    assert_eq!(values(&def), vec![json!([4, [4.0, 4.0]]), json!([9, [9.0, 9.0]])]);
    let def = DatasetDef::range(2).map("tuple").map("negate");
    assert_eq!(values(&def), vec![json!([0, [-0.0, -0.0]]), json!([-1, [-1.0, -1.0]])]);
}

#[test]
fn maps_work_on_float32_and_batched_tensors() {
    let def = DatasetDef::from_floats(vec![1.5, -2.0]).map("square");
    assert_eq!(json(&def), vec![json!(2.25), json!(4.0)]);
    let def = DatasetDef::range(4).batch(2, false).map_with("mul", vec![Arg::Int(3)]);
    assert_eq!(json(&def), vec![json!([0, 3]), json!([6, 9])]);
}

#[test]
fn add_and_mul_take_ints_and_floats() {
    assert_eq!(ints(&DatasetDef::range(3).map_with("add", vec![Arg::Int(-5)])), vec![-5, -4, -3]);
    assert_eq!(ints(&DatasetDef::range(3).map_with("mul", vec![Arg::Int(-2)])), vec![0, -2, -4]);
    let def = DatasetDef::from_floats(vec![1.0]).map_with("add", vec![Arg::Float(0.25)]);
    assert_eq!(json(&def), vec![json!(1.25)]);
    let def = DatasetDef::from_floats(vec![1.5]).map_with("mul", vec![Arg::Int(2)]);
    assert_eq!(json(&def), vec![json!(3.0)]);
    let out = run_with(
        &DatasetDef::from_floats(vec![1.0]).map_with("add", vec![Arg::Int(1)]),
        &registry(),
    );
    assert_eq!(out[0].as_ref().expect("ok").components[0].dtype(), DType::Float32);
}

#[test]
fn int_overflow_is_an_error() {
    let (name, message) = failure(&DatasetDef::from_ints(vec![i64::MAX]).map("square"));
    assert_eq!(name, "square");
    assert!(message.contains("overflow"), "{message}");
    let (_, message) =
        failure(&DatasetDef::from_ints(vec![i64::MAX]).map_with("add", vec![Arg::Int(1)]));
    assert!(message.contains("overflow"), "{message}");
    let (_, message) = failure(&DatasetDef::from_ints(vec![i64::MIN]).map("negate"));
    assert!(message.contains("overflow"), "{message}");
}

#[test]
fn wrong_argument_types_fail_at_run_time_naming_the_function() {
    let (name, message) =
        failure(&DatasetDef::range(2).map_with("add", vec![Arg::Str("1".into())]));
    assert_eq!(name, "add");
    assert!(message.contains("must be a number"), "{message}");
    let (name, message) = failure(&DatasetDef::range(2).map_with("mul", vec![Arg::Float(0.5)]));
    assert_eq!(name, "mul");
    assert!(message.contains("int64"), "{message}");
}

#[test]
fn numeric_maps_reject_other_dtypes_naming_them() {
    let (name, message) = failure(&DatasetDef::from_strings(vec!["a"]).map("square"));
    assert_eq!(name, "square");
    assert!(message.contains("string"), "{message}");
    let (_, message) = failure(&DatasetDef::from_bytes(vec![vec![1]]).map("to_string"));
    assert!(message.contains("bytes"), "{message}");
}

#[test]
fn identity_passes_any_dtype() {
    let def = DatasetDef::from_strings(vec!["x", "y"]).map("identity");
    assert_eq!(json(&def), vec![json!("x"), json!("y")]);
}

#[test]
fn to_string_renders_decimal_text() {
    let def = DatasetDef::from_ints(vec![-12, 7]).map("to_string");
    assert_eq!(json(&def), vec![json!("-12"), json!("7")]);
    let def = DatasetDef::from_floats(vec![0.1, 2.0]).map("to_string");
    assert_eq!(json(&def), vec![json!("0.1"), json!("2")]);
    let out = run_with(&DatasetDef::range(3).batch(3, false).map("to_string"), &registry());
    let t = &out[0].as_ref().expect("ok").components[0];
    assert_eq!((t.dtype(), t.shape()), (DType::String, &[3][..]));
    assert_eq!(t.to_json(), json!(["0", "1", "2"]));
}

#[test]
fn mod_eq_uses_euclidean_remainder() {
    let keep = |m, r| {
        ints(
            &DatasetDef::range_with(-4, 5, 1).filter_with("mod_eq", vec![Arg::Int(m), Arg::Int(r)]),
        )
    };
    assert_eq!(keep(3, 1), vec![-2, 1, 4]);
    assert_eq!(keep(-3, 2), vec![-4, -1, 2]);
    assert_eq!(keep(2, 5), Vec::<i64>::new());
    let extreme = DatasetDef::from_ints(vec![i64::MIN])
        .filter_with("mod_eq", vec![Arg::Int(-1), Arg::Int(0)]);
    assert_eq!(ints(&extreme), vec![i64::MIN]);
}

#[test]
fn mod_eq_by_zero_is_refused_at_check_time() {
    let def = DatasetDef::range(3).filter_with("mod_eq", vec![Arg::Int(0), Arg::Int(0)]);
    let err = FunctionRegistry::builtin().check(&def).expect_err("modulus 0");
    assert!(matches!(&err, DatasetError::BadArguments { name, .. } if name == "mod_eq"), "{err:?}");
    assert!(err.to_string().contains("must not be 0"), "{err}");
}

#[test]
fn comparison_filters() {
    let with = |f: &str, arg| ints(&DatasetDef::range(6).filter_with(f, vec![arg]));
    assert_eq!(with("lt", Arg::Int(2)), vec![0, 1]);
    assert_eq!(with("gt", Arg::Int(3)), vec![4, 5]);
    assert_eq!(with("eq", Arg::Int(4)), vec![4]);
    assert_eq!(with("lt", Arg::Float(1.5)), vec![0, 1]);
    let def = DatasetDef::from_floats(vec![0.5, 1.5, 2.5]).filter_with("gt", vec![Arg::Int(1)]);
    assert_eq!(json(&def), vec![json!(1.5), json!(2.5)]);
}

#[test]
fn filters_need_a_one_component_numeric_scalar() {
    let (name, message) =
        failure(&DatasetDef::range(4).batch(2, false).filter_with("lt", vec![Arg::Int(1)]));
    assert_eq!(name, "lt");
    assert!(message.contains("scalar"), "{message}");
    let (_, message) =
        failure(&DatasetDef::range(2).map("tuple").filter_with("eq", vec![Arg::Int(1)]));
    assert!(message.contains("2 components"), "{message}");
    let (_, message) =
        failure(&DatasetDef::from_strings(vec!["a"]).filter_with("eq", vec![Arg::Int(1)]));
    assert!(message.contains("string"), "{message}");
    let (_, message) = failure(
        &DatasetDef::from_floats(vec![1.0]).filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(1)]),
    );
    assert!(message.contains("int64"), "{message}");
    let (_, message) = failure(&DatasetDef::range(2).filter_with("gt", vec![Arg::Str("a".into())]));
    assert!(message.contains("must be a number"), "{message}");
}
