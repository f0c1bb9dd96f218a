//! `from_tensor_slices` with `tensors`: tf.data's slicing of tensors of any rank
//! along their first dimension, its JSON form, its checks, and the sharding of it.

mod common;

use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use common::{json, run};
use serde_json::{json, Value};
use sluice_dataset::{
    Cardinality, DType, DatasetDef, DatasetError, FunctionRegistry, SliceValues, SplitProvider,
    SplitRange, Stage, StaticPolicy, Tensor,
};

fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i64s(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The string/bytes payload layout: each item as a u32 LE length, then its bytes.
fn items(values: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

/// The spec of the brief's example: x float32 [4, 3] (x[i][j] = 10i + j), y int64 [4].
fn xy_spec() -> Value {
    let x: Vec<f32> = (0..4).flat_map(|i| (0..3).map(move |j| (10 * i + j) as f32)).collect();
    json!({"stages": [{"from_tensor_slices": {
        "tensors": [
            {"dtype": "float32", "shape": [4, 3], "base64": b64(&f32s(&x))},
            {"dtype": "int64", "shape": [4], "base64": b64(&i64s(&[7, -8, 9, i64::MIN]))}
        ],
        "names": ["x", "y"]
    }}]})
}

fn parse(spec: &Value) -> DatasetDef {
    DatasetDef::from_json(&spec.to_string()).expect("the spec parses")
}

/// The spec with `from_tensor_slices`' value replaced by `value`.
fn with_slices(value: Value) -> String {
    json!({"stages": [{"from_tensor_slices": value}]}).to_string()
}

fn err(spec: &str) -> (String, String) {
    match DatasetDef::from_json(spec) {
        Err(DatasetError::InvalidSpec { field, message }) => (field, message),
        other => panic!("expected InvalidSpec for {spec}, got {other:?}"),
    }
}

#[test]
fn named_matrix_and_vector_slice_into_named_rows() {
    let def = parse(&xy_spec());
    assert_eq!(def.cardinality(), Cardinality::Finite(4));
    let out: Vec<_> = run(&def).into_iter().map(|r| r.expect("no element fails")).collect();
    assert_eq!(out.len(), 4);
    for (i, e) in out.iter().enumerate() {
        assert_eq!(e.names.as_deref(), Some(&["x".to_string(), "y".to_string()][..]));
        let (x, y) = (&e.components[0], &e.components[1]);
        assert_eq!((x.dtype(), x.shape()), (DType::Float32, &[3][..]));
        assert_eq!((y.dtype(), y.shape()), (DType::Int64, &[][..]));
        let row: Vec<f32> = (0..3).map(|j| (10 * i + j) as f32).collect();
        assert_eq!(x.f32_values().expect("float32"), row);
    }
    let ys: Vec<i64> = out.iter().map(|e| e.get("y").expect("y").as_i64().expect("int")).collect();
    assert_eq!(ys, vec![7, -8, 9, i64::MIN]);
    assert_eq!(json(&def)[1], json!({"x": [10.0, 11.0, 12.0], "y": -8}));
}

#[test]
fn rows_are_slices_of_the_payload_not_copies() {
    let def = parse(&xy_spec());
    let Stage::FromTensorSlices(SliceValues::Tensors { tensors, .. }) = &def.stages[0] else {
        panic!("expected a tensors source, got {:?}", def.stages[0]);
    };
    let base = tensors[0].data().as_ptr() as usize;
    for (i, e) in run(&def).into_iter().enumerate() {
        let row = e.expect("ok").components[0].data().as_ptr() as usize;
        assert_eq!(row, base + i * 12, "row {i} should point into the source's payload");
    }
}

#[test]
fn string_and_bytes_tensors_slice_by_item() {
    let spec = with_slices(json!({"tensors": [
        {"dtype": "string", "shape": [3, 2], "base64": b64(&items(&["a", "bc", "", "dé", "xyz", "w"]))},
        {"dtype": "bytes", "shape": [3], "base64": b64(&items(&["p", "", "qq"]))},
        {"dtype": "bool", "shape": [3, 1], "base64": b64(&[1, 0, 1])},
        {"dtype": "uint8", "shape": [3, 0], "base64": ""}
    ]}));
    let def = DatasetDef::from_json(&spec).expect("parses");
    let out: Vec<_> = run(&def).into_iter().map(|r| r.expect("ok")).collect();
    assert_eq!(out[0].names, None);
    assert_eq!(out[1].components[0].dtype(), DType::String);
    assert_eq!(out[1].components[0].shape(), &[2]);
    assert_eq!(out[2].components[1].dtype(), DType::Bytes);
    assert_eq!(out[2].components[3].shape(), &[0]);
    assert_eq!(
        json(&def),
        vec![
            json!([["a", "bc"], "p", [true], []]),
            json!([["", "dé"], "", [false], []]),
            json!([["xyz", "w"], "qq", [true], []]),
        ]
    );
}

#[test]
fn the_builder_makes_what_the_json_form_parses_to() {
    let x = Tensor::from_f64s(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]).expect("tensor");
    let y = Tensor::from_items(DType::String, vec![2], &["a", "b"]).expect("tensor");
    let built = DatasetDef::from_named_tensors(vec![("x", x.clone()), ("y", y.clone())]);
    let spec = with_slices(json!({
        "tensors": [
            {"dtype": "float64", "shape": [2, 2], "base64": b64(x.data())},
            {"dtype": "string", "shape": [2], "base64": b64(y.data())}
        ],
        "names": ["x", "y"]
    }));
    assert_eq!(DatasetDef::from_json(&spec).expect("parses"), built);
    assert_eq!(json(&DatasetDef::from_tensors(vec![y])), vec![json!("a"), json!("b")]);
}

#[test]
fn parsing_then_printing_gives_the_same_json() {
    let spec = xy_spec();
    let printed: Value =
        serde_json::from_str(&parse(&spec).to_json()).expect("to_json prints JSON");
    assert_eq!(printed, spec);
    let unnamed = json!({"stages": [{"from_tensor_slices": {"tensors": [
        {"dtype": "bytes", "shape": [1], "base64": b64(&items(&["z"]))}
    ]}}]});
    let printed: Value =
        serde_json::from_str(&parse(&unnamed).to_json()).expect("to_json prints JSON");
    assert_eq!(printed, unnamed);
    let def = parse(&spec);
    assert_eq!(DatasetDef::from_json(&def.to_json_compact()).expect("reparses"), def);
}

#[test]
fn the_simple_forms_print_as_before() {
    for value in [
        json!({"ints": [1, -2]}),
        json!({"floats": [0.5, 2.0]}),
        json!({"strings": ["a"]}),
        json!({"bytes": [[0, 255]]}),
    ] {
        let spec = json!({"stages": [{"from_tensor_slices": value}]});
        let printed: Value = serde_json::from_str(&parse(&spec).to_json()).expect("json");
        assert_eq!(printed, spec);
    }
}

#[test]
fn each_check_says_what_is_wrong() {
    let x = json!({"dtype": "int64", "shape": [4], "base64": b64(&i64s(&[1, 2, 3, 4]))});
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"tensors": [x, {"dtype": "int64", "shape": [3], "base64": b64(&i64s(&[1, 2, 3]))}]}),
            "stages[0].from_tensor_slices.tensors[1]",
            "first dimension 3 differs from tensors[0]'s 4; every tensor is sliced along its \
             first dimension, so they must agree",
        ),
        (
            json!({"tensors": [{"dtype": "int64", "shape": [], "base64": b64(&i64s(&[1]))}]}),
            "stages[0].from_tensor_slices.tensors[0].shape",
            "is [] (a scalar), which has no first dimension to slice",
        ),
        (
            json!({"tensors": [{"dtype": "float32", "shape": [4, 3], "base64": b64(&[0; 44])}]}),
            "stages[0].from_tensor_slices.tensors[0]",
            "the payload is 44 bytes, but a float32 tensor of shape [4, 3] needs 12 values x 4 \
             bytes = 48 bytes; the payload is the values, little-endian, in row-major order",
        ),
        (
            json!({"tensors": [{"dtype": "string", "shape": [3], "base64": b64(&items(&["a", "b"]))}]}),
            "stages[0].from_tensor_slices.tensors[0]",
            "the payload holds 2 items, but a string tensor of shape [3] needs 3; each item is \
             a u32 little-endian length",
        ),
        (
            json!({"tensors": [{"dtype": "bytes", "shape": [1], "base64": b64(&[9, 0, 0, 0, 1])}]}),
            "stages[0].from_tensor_slices.tensors[0]",
            "item 0 (at byte 0) claims 9 bytes, but only 1 remain",
        ),
        (
            json!({"tensors": [{"dtype": "bytes", "shape": [1], "base64": b64(&[1, 0])}]}),
            "stages[0].from_tensor_slices.tensors[0]",
            "the payload ends inside the length of item 0 (at byte 0)",
        ),
        (
            json!({"tensors": [{"dtype": "int64", "shape": [1], "base64": "AAAA*AAAAAA="}]}),
            "stages[0].from_tensor_slices.tensors[0].base64",
            "is not valid base64",
        ),
        (
            json!({"tensors": [{"dtype": "int16", "shape": [1], "base64": ""}]}),
            "stages[0].from_tensor_slices.tensors[0].dtype",
            "unknown variant `int16`",
        ),
        (
            json!({"tensors": [{"dtype": "int64", "shape": [0], "base64": "", "data": []}]}),
            "stages[0].from_tensor_slices.tensors[0].data",
            "unknown field `data`",
        ),
        (json!({"tensors": []}), "stages[0].from_tensor_slices.tensors", "at least one tensor"),
        (
            json!({"tensors": [x], "names": ["a", "b"]}),
            "stages[0].from_tensor_slices.names",
            "has 2 name(s) for 1 tensor(s); give one name per tensor",
        ),
        (
            json!({"tensors": [x], "names": [""]}),
            "stages[0].from_tensor_slices.names[0]",
            "is empty",
        ),
        (
            json!({"tensors": [x, x], "names": ["a", "a"]}),
            "stages[0].from_tensor_slices.names[1]",
            "`a` is listed twice; names must be distinct",
        ),
        (
            json!({"ints": [1], "tensors": [x]}),
            "stages[0].from_tensor_slices",
            "has both `ints` and `tensors`; give exactly one of",
        ),
        (
            json!({}),
            "stages[0].from_tensor_slices",
            "needs exactly one of `ints`, `floats`, `strings`, `bytes` or `tensors`, and has none",
        ),
        (
            json!({"ints": [1], "names": ["a"]}),
            "stages[0].from_tensor_slices",
            "`names` goes with `tensors` (one name per tensor), not with `ints`",
        ),
    ];
    for (value, want_field, want_message) in cases {
        let (field, message) = err(&with_slices(value.clone()));
        assert_eq!(field, want_field, "for {value}: {message}");
        assert!(message.contains(want_message), "for {value}: {message}");
    }
    // `json!` sorts keys; the form met second is the one refused, in either order.
    let tensors_first = r#"{"stages": [{"from_tensor_slices":
        {"tensors": [{"dtype": "bool", "shape": [1], "base64": "AQ=="}], "floats": [1.0]}}]}"#;
    let (field, message) = err(tensors_first);
    assert_eq!(field, "stages[0].from_tensor_slices");
    assert!(message.contains("has both `tensors` and `floats`"), "{message}");
}

#[test]
fn builder_made_tensors_are_checked_too() {
    let scalar = Tensor::scalar_i64(1);
    let err = DatasetDef::from_tensors(vec![scalar]).validate().expect_err("rank 0");
    assert!(
        matches!(&err, DatasetError::InvalidSpec { field, .. }
            if field == "stages[0].from_tensor_slices.tensors[0].shape"),
        "{err:?}"
    );
}

/// Hands out fixed splits, then ends the epoch.
struct Splits(Arc<Mutex<Vec<(u64, u64)>>>);

impl SplitProvider for Splits {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        let mut left = self.0.lock().expect("splits lock");
        Ok((!left.is_empty()).then(|| left.remove(0)).map(|(begin, end)| SplitRange { begin, end }))
    }
    fn reset(&mut self) -> Result<(), DatasetError> {
        Ok(())
    }
}

#[test]
fn dynamic_splits_give_the_rows_of_their_indices() {
    let def = parse(&xy_spec());
    assert_eq!(def.source_cardinality(), Some(4));
    def.check_dynamic().expect("DYNAMIC can split a tensors source");
    let splits = Splits(Arc::new(Mutex::new(vec![(3, 4), (0, 2)])));
    let ys: Vec<i64> = def
        .iter_with_splits(&FunctionRegistry::builtin(), Box::new(splits))
        .expect("valid")
        .map(|r| r.expect("ok").get("y").expect("y").as_i64().expect("int"))
        .collect();
    assert_eq!(ys, vec![i64::MIN, 7, -8]);
    let beyond = Splits(Arc::new(Mutex::new(vec![(2, 5)])));
    let out: Vec<_> =
        def.iter_with_splits(&FunctionRegistry::builtin(), Box::new(beyond)).expect("ok").collect();
    assert!(matches!(&out[..], [Err(DatasetError::Split(m))] if m.contains("[2, 5)")), "{out:?}");
}

#[test]
fn data_sharding_gives_each_worker_every_nth_row() {
    let def = parse(&xy_spec());
    let worker1 = def.for_worker(StaticPolicy::Data, 3, 1).expect("DATA shards any source");
    let ys: Vec<Value> = json(&worker1).into_iter().map(|e| e["y"].clone()).collect();
    assert_eq!(ys, vec![json!(-8)]);
    let worker0 = def.for_worker(StaticPolicy::Data, 3, 0).expect("DATA shards any source");
    let ys: Vec<Value> = json(&worker0).into_iter().map(|e| e["y"].clone()).collect();
    assert_eq!(ys, vec![json!(7), json!(i64::MIN)]);
}

#[test]
fn the_documented_example_gives_the_documented_elements() {
    let spec = r#"{"stages": [{"from_tensor_slices": {
      "tensors": [
        {"dtype": "float32", "shape": [2, 3], "base64": "AACAPwAAAEAAAEBAAACAQAAAoEAAAMBA"},
        {"dtype": "int64", "shape": [2], "base64": "BwAAAAAAAAD4/////////w=="}
      ],
      "names": ["x", "y"]
    }}]}"#;
    let def = DatasetDef::from_json(spec).expect("the documented example parses");
    assert_eq!(
        json(&def),
        vec![json!({"x": [1.0, 2.0, 3.0], "y": 7}), json!({"x": [4.0, 5.0, 6.0], "y": -8})]
    );
}
