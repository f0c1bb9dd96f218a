//! `parse_example`: tf.train.Example records into named tensors, and its errors.

mod common;

use serde_json::json;
use sluice_dataset::formats::example::{encode, Feature};
use sluice_dataset::{Arg, DType, DatasetDef, DatasetError, Element, FeatureSpec};

fn spec(name: &str, dtype: DType, shape: Option<Vec<u64>>, default: Option<Arg>) -> FeatureSpec {
    FeatureSpec { name: name.into(), dtype, shape, default }
}

fn record(features: Vec<(&str, Feature)>) -> Vec<u8> {
    encode(features.into_iter().map(|(k, v)| (k.to_string(), v)))
}

fn parse_one(rec: Vec<u8>, specs: Vec<FeatureSpec>) -> Result<Element, DatasetError> {
    let def = DatasetDef::from_bytes(vec![rec]).parse_example(specs);
    common::run(&def).remove(0)
}

fn err_text(rec: Vec<u8>, specs: Vec<FeatureSpec>) -> String {
    parse_one(rec, specs).expect_err("fails").to_string()
}

#[test]
fn parses_each_dtype_and_shape_into_named_components() {
    let rec = record(vec![
        ("label", Feature::ints(vec![7])),
        ("box", Feature::floats(vec![0.5, 1.5, 2.5, 3.5])),
        ("tags", Feature::bytes([&b"a"[..], b"bc"])),
        ("id", Feature::bytes([&b"x1"[..]])),
        ("unused", Feature::ints(vec![1, 2])),
    ]);
    let e = parse_one(
        rec,
        vec![
            spec("label", DType::Int64, Some(vec![]), None),
            spec("box", DType::Float32, Some(vec![2, 2]), None),
            spec("tags", DType::Bytes, None, None),
            spec("id", DType::String, Some(vec![]), None),
            spec("weight", DType::Float32, Some(vec![2]), Some(Arg::Float(0.25))),
            spec("extra", DType::Int64, None, None),
        ],
    )
    .expect("parses");
    assert_eq!(e.get("label").expect("label").shape(), &[] as &[u64]);
    assert_eq!(e.get("box").expect("box").shape(), &[2, 2]);
    assert_eq!(e.get("tags").expect("tags").shape(), &[2]);
    assert_eq!(e.get("id").expect("id").dtype(), DType::String);
    assert_eq!(e.get("extra").expect("extra").shape(), &[0], "variable-length, absent: empty");
    assert_eq!(
        e.to_json(),
        json!({
            "label": 7, "box": [[0.5, 1.5], [2.5, 3.5]], "tags": ["a", "bc"], "id": "x1",
            "weight": [0.25, 0.25], "extra": []
        })
    );
    let names: Vec<&str> = e.names.as_deref().expect("named").iter().map(String::as_str).collect();
    assert_eq!(names, ["label", "box", "tags", "id", "weight", "extra"]);
}

#[test]
fn elements_of_one_stage_share_their_names() {
    let recs = (0..3).map(|i| record(vec![("x", Feature::ints(vec![i]))])).collect();
    let def = DatasetDef::from_bytes(recs).parse_example(vec![spec(
        "x",
        DType::Int64,
        Some(vec![]),
        None,
    )]);
    let out: Vec<Element> = common::run(&def).into_iter().map(|r| r.expect("ok")).collect();
    let first = out[0].names.clone().expect("named");
    assert!(out.iter().all(|e| std::sync::Arc::ptr_eq(e.names.as_ref().expect("named"), &first)));
}

#[test]
fn wrong_value_count_names_feature_and_counts() {
    let rec = record(vec![("box", Feature::floats(vec![1.0, 2.0, 3.0]))]);
    let err = err_text(rec, vec![spec("box", DType::Float32, Some(vec![4]), None)]);
    assert!(
        err.contains("`box`") && err.contains("expected 4 values") && err.contains("found 3"),
        "{err}"
    );
}

#[test]
fn missing_feature_without_default_is_an_error() {
    let rec = record(vec![("a", Feature::ints(vec![1]))]);
    let err = err_text(rec, vec![spec("label", DType::Int64, Some(vec![]), None)]);
    assert!(err.contains("`label`") && err.contains("missing"), "{err}");
}

#[test]
fn wrong_list_kind_names_expected_and_found() {
    let rec = record(vec![("label", Feature::floats(vec![1.0]))]);
    let err = err_text(rec, vec![spec("label", DType::Int64, Some(vec![]), None)]);
    assert!(
        err.contains("`label`")
            && err.contains("expected int64_list")
            && err.contains("found float_list"),
        "{err}"
    );
}

#[test]
fn default_of_the_wrong_type_is_an_error() {
    let rec = record(vec![]);
    let err =
        err_text(rec, vec![spec("n", DType::Int64, Some(vec![]), Some(Arg::Str("x".into())))]);
    assert!(err.contains("`n`") && err.contains("does not fit dtype int64"), "{err}");
}

#[test]
fn garbage_records_and_non_bytes_inputs_are_errors() {
    let err = err_text(vec![0xff, 0xff, 0xff], vec![spec("x", DType::Int64, None, None)]);
    assert!(err.contains("not a tf.train.Example"), "{err}");
    let def = DatasetDef::range(1).parse_example(vec![spec("x", DType::Int64, None, None)]);
    let err = common::run(&def).remove(0).expect_err("int input").to_string();
    assert!(err.contains("bytes or string scalar"), "{err}");
}

/// The bytes TensorFlow writes for `{"a": int64_list [1, 2], "b": bytes_list ["x"]}`
/// (field numbers of tensorflow/core/example/{example,feature}.proto, worked out by
/// hand): encoding gives exactly them, and parsing them gives the values back.
#[test]
fn the_wire_format_is_tensorflows() {
    #[rustfmt::skip]
    let tf: Vec<u8> = vec![
        0x0a, 0x1a,                         // Example.features, 26 bytes
        0x0a, 0x0b,                         //   Features.feature entry, 11 bytes
        0x0a, 0x01, b'a',                   //     key "a"
        0x12, 0x06,                         //     value: Feature, 6 bytes
        0x1a, 0x04, 0x0a, 0x02, 0x01, 0x02, //       int64_list, packed [1, 2]
        0x0a, 0x0b,                         //   Features.feature entry, 11 bytes
        0x0a, 0x01, b'b',                   //     key "b"
        0x12, 0x06,                         //     value: Feature, 6 bytes
        0x0a, 0x04, 0x0a, 0x02, b'h', b'i', //       bytes_list ["hi"]
    ];
    let ours = record(vec![("a", Feature::ints(vec![1, 2])), ("b", Feature::bytes([&b"hi"[..]]))]);
    assert_eq!(ours, tf);
    let specs = vec![spec("a", DType::Int64, None, None), spec("b", DType::Bytes, None, None)];
    let element = parse_one(tf, specs).expect("parses");
    assert_eq!(element.to_json(), json!({"a": [1, 2], "b": ["hi"]}));
}

/// Found by fuzzing (`fuzz/regressions/example/`, replayed by `fuzz_corpus.rs`): a
/// fixed shape whose product overflows u64 used to panic (or wrap to 0 values), and
/// a default broadcast to a huge shape allocated it. Validation now refuses both,
/// naming the limit, before a record is parsed.
#[test]
fn shapes_that_overflow_or_exceed_the_limit_never_reach_the_parser() {
    for shape in [vec![1 << 32, 1 << 32], vec![1 << 20, 1 << 20]] {
        let def = DatasetDef::tfrecord(vec!["x.tfrecord"]).parse_example(vec![spec(
            "x",
            DType::Int64,
            Some(shape),
            Some(Arg::Int(1)),
        )]);
        let e = def.validate().expect_err("refused").to_string();
        assert!(e.contains("MAX_FEATURE_VALUES"), "{e}");
    }
}
