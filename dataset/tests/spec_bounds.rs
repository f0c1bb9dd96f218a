//! Spec parameters that size a worker's memory are bounded (`sluice_dataset::bounds`):
//! a value over its limit is refused by `validate` (so by the client, by the
//! dispatcher at registration and by the worker), naming the field and the limit;
//! a value at the limit is accepted. And a hostile Example record fails its element.

use sluice_dataset::bounds::{
    MAX_BATCH_SIZE, MAX_FEATURE_DEFAULT_BYTES, MAX_FEATURE_VALUES, MAX_SHUFFLE_BUFFER,
};
use sluice_dataset::formats::example::{encode, Feature};
use sluice_dataset::{Arg, DType, DatasetDef, DatasetError, FeatureSpec, FunctionRegistry};

fn refused(def: &DatasetDef, field: &str, limit: &str) {
    match def.validate() {
        Err(DatasetError::InvalidSpec { field: f, message }) => {
            assert!(f.ends_with(field), "field {f}, expected {field}");
            assert!(message.contains(limit), "names the limit: {message}");
        }
        other => panic!("expected InvalidSpec at {field}, got {other:?}"),
    }
}

fn feature(shape: Vec<u64>, dtype: DType, default: Option<Arg>) -> FeatureSpec {
    FeatureSpec { name: "f".into(), dtype, shape: Some(shape), default }
}

#[test]
fn batch_and_shuffle_sizes_over_their_limits_are_refused() {
    refused(
        &DatasetDef::range(3).batch(MAX_BATCH_SIZE + 1, false),
        "stages[1].batch.size",
        "MAX_BATCH_SIZE",
    );
    refused(
        &DatasetDef::range(3).shuffle(u64::MAX, 1),
        "stages[1].shuffle.buffer_size",
        "MAX_SHUFFLE_BUFFER",
    );
    DatasetDef::range(3)
        .batch(MAX_BATCH_SIZE, false)
        .shuffle(MAX_SHUFFLE_BUFFER, 1)
        .validate()
        .expect("at the limits");
    // The JSON form goes through the same check.
    let json = r#"{"stages": [{"range": {"stop": 3}}, {"batch": {"size": 1099511627776}}]}"#;
    let err =
        DatasetDef::from_json(json).and_then(|d| d.validate().map(|()| d)).expect_err("refused");
    assert!(err.to_string().contains("MAX_BATCH_SIZE"), "{err}");
}

#[test]
fn parse_example_shapes_that_overflow_or_exceed_the_limit_are_refused() {
    let tf = || DatasetDef::tfrecord(vec!["x.tfrecord"]);
    // The product wraps u64 (2^32 × 2^32 = 2^64 ≡ 0): it used to pass as 0 values.
    let wrap = feature(vec![1 << 32, 1 << 32], DType::Int64, None);
    refused(
        &tf().parse_example(vec![wrap]),
        "parse_example.features[0].shape",
        "MAX_FEATURE_VALUES",
    );
    let big = feature(vec![MAX_FEATURE_VALUES + 1], DType::Float32, Some(Arg::Float(0.0)));
    refused(
        &tf().parse_example(vec![big]),
        "parse_example.features[0].shape",
        "MAX_FEATURE_VALUES",
    );
    // A string default broadcast to a large shape.
    let s = "x".repeat(1024);
    let wide =
        feature(vec![MAX_FEATURE_DEFAULT_BYTES / 1024 + 1], DType::String, Some(Arg::Str(s)));
    refused(
        &tf().parse_example(vec![wide]),
        "parse_example.features[0].default",
        "MAX_FEATURE_DEFAULT_BYTES",
    );
    let ok = feature(vec![MAX_FEATURE_VALUES], DType::Int64, None);
    tf().parse_example(vec![ok]).validate().expect("at the limit");
}

#[test]
fn an_example_with_too_many_features_fails_its_element_naming_the_limit() {
    let limit = sluice_dataset::formats::example_bounds::MAX_EXAMPLE_FEATURES;
    let hostile = encode((0..=limit).map(|i| (i.to_string(), Feature { kind: None })));
    let fine = encode([("0".to_string(), Feature::ints(vec![7]))]);
    let def = DatasetDef::from_bytes(vec![hostile, fine]).parse_example(vec![FeatureSpec {
        name: "0".into(),
        dtype: DType::Int64,
        shape: None,
        default: None,
    }]);
    let out: Vec<_> = def.iter_local(&FunctionRegistry::builtin()).expect("starts").collect();
    let err = out[0].as_ref().expect_err("refused").to_string();
    assert!(err.contains("MAX_EXAMPLE_FEATURES"), "{err}");
}
