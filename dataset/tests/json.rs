//! The JSON form: round trips, defaults, and errors that name the offending field.

use sluice_dataset::{Arg, DatasetDef, DatasetError, SliceValues, Stage};

fn err(json: &str) -> (String, String) {
    match DatasetDef::from_json(json) {
        Err(DatasetError::InvalidSpec { field, message }) => (field, message),
        other => panic!("expected InvalidSpec for {json}, got {other:?}"),
    }
}

#[test]
fn every_op_round_trips() {
    let def = DatasetDef::range_with(-3, 40, 2)
        .map("square")
        .map_with("add", vec![Arg::Int(1)])
        .map_with("mul", vec![Arg::Float(0.5)])
        .map_with("custom", vec![Arg::Str("x".into())])
        .filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(0)])
        .batch(4, true)
        .shuffle(100, 7)
        .repeat(3)
        .repeat_forever()
        .take(5)
        .skip(1)
        .prefetch(2);
    let back = DatasetDef::from_json(&def.to_json()).expect("round trip parses");
    assert_eq!(back, def);
}

#[test]
fn every_slice_kind_round_trips() {
    for def in [
        DatasetDef::from_ints(vec![1, -2, i64::MAX]),
        DatasetDef::from_floats(vec![0.1, -2.5, f32::MAX]),
        DatasetDef::from_strings(vec!["a", "", "ünï"]),
        DatasetDef::from_bytes(vec![vec![0, 255], vec![]]),
    ] {
        assert_eq!(DatasetDef::from_json(&def.to_json()).expect("parses"), def);
    }
}

#[test]
fn the_documented_example_parses_with_defaults() {
    let json = r#"{"stages": [
        {"range": {"stop": 10}},
        {"map": {"fn": "add", "args": [1]}},
        {"filter": {"fn": "mod_eq", "args": [2, 0]}},
        {"batch": {"size": 4, "drop_remainder": true}},
        {"shuffle": {"buffer_size": 100, "seed": 7}},
        {"repeat": {"count": 3}},
        {"repeat": {}},
        {"take": {"count": 5}},
        {"skip": {"count": 1}},
        {"prefetch": {"buffer_size": 2}}
    ]}"#;
    let def = DatasetDef::from_json(json).expect("parses");
    let want = DatasetDef::range(10)
        .map_with("add", vec![Arg::Int(1)])
        .filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(0)])
        .batch(4, true)
        .shuffle(100, 7)
        .repeat(3)
        .repeat_forever()
        .take(5)
        .skip(1)
        .prefetch(2);
    assert_eq!(def, want);
}

#[test]
fn omitted_fields_take_their_defaults() {
    let def = DatasetDef::from_json(
        r#"{"stages": [{"range": {"stop": 3}}, {"map": {"fn": "square"}},
            {"batch": {"size": 2}}, {"shuffle": {"buffer_size": 4}}]}"#,
    )
    .expect("parses");
    assert_eq!(def.stages[0], Stage::Range { start: 0, stop: 3, step: 1 });
    assert_eq!(
        def.stages[1],
        Stage::Map {
            name: "square".into(),
            args: vec![],
            num_parallel_calls: 1,
            deterministic: true
        }
    );
    assert_eq!(def.stages[2], Stage::Batch { size: 2, drop_remainder: false });
    assert_eq!(def.stages[3], Stage::Shuffle { buffer_size: 4, seed: 0 });
}

#[test]
fn slices_and_arg_types_parse() {
    let def = DatasetDef::from_json(
        r#"{"stages": [{"from_tensor_slices": {"strings": ["a", "b"]}},
            {"map": {"fn": "f", "args": [1, 1.5, "s"]}}]}"#,
    )
    .expect("parses");
    assert_eq!(
        def.stages[0],
        Stage::FromTensorSlices(SliceValues::Strings(vec!["a".into(), "b".into()]))
    );
    let Stage::Map { args, .. } = &def.stages[1] else { panic!("expected a map stage") };
    assert_eq!(*args, vec![Arg::Int(1), Arg::Float(1.5), Arg::Str("s".into())]);
}

#[test]
fn wrong_type_names_the_field() {
    let (field, message) =
        err(r#"{"stages": [{"range": {"stop": 10}}, {"batch": {"size": "four"}}]}"#);
    assert_eq!(field, "stages[1].batch.size");
    assert!(message.contains("invalid type"), "{message}");
}

#[test]
fn missing_field_names_the_stage_and_the_field() {
    let (field, message) =
        err(r#"{"stages": [{"range": {"stop": 10}}, {"batch": {"drop_remainder": true}}]}"#);
    assert_eq!(field, "stages[1].batch");
    assert!(message.contains("missing field `size`"), "{message}");
}

#[test]
fn unknown_op_names_the_stage_and_lists_the_ops() {
    let (field, message) = err(r#"{"stages": [{"range": {"stop": 10}}, {"unzip": {}}]}"#);
    assert_eq!(field, "stages[1]");
    assert!(message.contains("unknown variant `unzip`"), "{message}");
    assert!(message.contains("`prefetch`"), "{message}");
}

#[test]
fn unknown_fields_are_rejected_everywhere() {
    let (field, message) =
        err(r#"{"stages": [{"range": {"stop": 10}}, {"batch": {"size": 2, "extra": 1}}]}"#);
    assert_eq!(field, "stages[1].batch.extra");
    assert!(message.contains("unknown field `extra`"), "{message}");

    let (field, _) =
        err(r#"{"stages": [{"range": {"stop": 1}}, {"map": {"fn": "f", "argz": []}}]}"#);
    assert_eq!(field, "stages[1].map.argz");
    let (field, _) = err(r#"{"stages": [{"from_tensor_slices": {"doubles": [1.0]}}]}"#);
    assert_eq!(field, "stages[0].from_tensor_slices");
    let (field, _) = err(r#"{"stages": [], "name": "x"}"#);
    assert_eq!(field, "name");
}

#[test]
fn bad_list_item_names_its_index() {
    let (field, _) = err(r#"{"stages": [{"from_tensor_slices": {"ints": [1, "a"]}}]}"#);
    assert_eq!(field, "stages[0].from_tensor_slices.ints[1]");
}

#[test]
fn syntax_error_gives_line_and_column() {
    let (field, message) = err("{\"stages\": [\n  {\"range\": {\"stop\": 10}},\n]}");
    assert_eq!(field, "(json)");
    assert!(message.contains("line 3 column 1"), "{message}");
    let (field, message) = err(r#"{"stages": [{"range": {"stop": 1}}]} trailing"#);
    assert_eq!(field, "(json)");
    assert!(message.contains("column"), "{message}");
}

#[test]
fn parsed_definitions_are_validated() {
    let (field, message) = err(r#"{"stages": [{"range": {"stop": 10}}, {"batch": {"size": 0}}]}"#);
    assert_eq!(field, "stages[1].batch.size");
    assert!(message.contains("> 0"), "{message}");
    let (field, _) = err(r#"{"stages": [{"take": {"count": 1}}]}"#);
    assert_eq!(field, "stages[0].take");
    let (field, _) = err(r#"{"stages": []}"#);
    assert_eq!(field, "stages");
}

#[test]
fn file_sources_use_their_documented_op_names() {
    for (json, op) in [
        (r#"{"stages": [{"tfrecord": {"files": ["a"], "skip_corrupt": true}}]}"#, "tfrecord"),
        (r#"{"stages": [{"text_lines": {"files": ["a"]}}]}"#, "text_lines"),
        (r#"{"stages": [{"list_files": {"pattern": "/d/*", "seed": 0}}]}"#, "list_files"),
    ] {
        let def = DatasetDef::from_json(json).expect("the documented form parses");
        assert_eq!(def.stages[0].op_name(), op);
        let printed: serde_json::Value = serde_json::from_str(&def.to_json()).expect("json");
        let given: serde_json::Value = serde_json::from_str(json).expect("json");
        assert_eq!(printed, given, "{op} prints back as given");
    }
    // What the derive printed before the rename is still read.
    let old = DatasetDef::from_json(r#"{"stages": [{"tf_record": {"files": ["a"]}}]}"#);
    assert_eq!(old.expect("tf_record still parses"), DatasetDef::tfrecord(vec!["a"]));
}

/// Found by fuzzing (`fuzz/regressions/dataset_spec/`): `1e39` parsed as an f32 is
/// infinite, which the JSON form writes as `null`; the spec was accepted, and its
/// canonical form (what the dispatcher replicates in its log) could not be read back.
#[test]
fn a_float_beyond_float32_is_refused_naming_the_value() {
    let (field, message) = err(r#"{"stages": [{"from_tensor_slices": {"floats": [1.5, 1e39]}}]}"#);
    assert_eq!(field, "stages[0].from_tensor_slices.floats[1]");
    assert!(message.contains("inf is not a finite float32"), "{message}");
    let def = DatasetDef::from_floats(vec![f32::NAN]);
    assert!(def.validate().is_err(), "NaN has no JSON form either");
    let ok = DatasetDef::from_json(r#"{"stages": [{"from_tensor_slices": {"floats": [3e38]}}]}"#);
    assert!(DatasetDef::from_json(&ok.expect("in range").to_json()).is_ok(), "3e38 round-trips");
}
