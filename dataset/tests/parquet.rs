//! Parquet tables (files written here by arrow-rs's `ArrowWriter`): rows as
//! named tensors, column projection, the row group as split unit and origin,
//! nulls and defaults, `batch_rows`, FILE sharding, and bad input.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Float32Array, Float64Array, Int64Array,
    Int8Array, RecordBatch, StringArray, StructArray, UInt64Array,
};
use arrow_schema::{DataType, Field};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use serde_json::json;
use sluice_dataset::formats::parquet::ParquetSource;
use sluice_dataset::{
    Arg, DatasetDef, DatasetError, Element, FunctionRegistry, Stage, StaticPolicy, TaggedIter,
};
use sluice_positions::Run;

/// Writes `columns` as a Parquet file of row groups of `group_rows` rows.
fn write(
    dir: &std::path::Path,
    name: &str,
    columns: Vec<(&str, ArrayRef)>,
    group_rows: usize,
) -> String {
    let batch = RecordBatch::try_from_iter(columns).expect("a batch");
    let path = dir.join(name);
    let props = WriterProperties::builder().set_max_row_group_row_count(Some(group_rows)).build();
    let file = std::fs::File::create(&path).expect("create");
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    path.to_string_lossy().into_owned()
}

/// A file of ids `first..first + rows` (column `id`) and their text (`text`).
fn ids(dir: &std::path::Path, name: &str, first: i64, rows: i64, group_rows: usize) -> String {
    let id = Int64Array::from_iter_values(first..first + rows);
    let text = StringArray::from_iter_values((first..first + rows).map(|i| format!("row {i}")));
    write(dir, name, vec![("id", Arc::new(id)), ("text", Arc::new(text))], group_rows)
}

fn source(files: Vec<String>) -> ParquetSource {
    ParquetSource::new(files)
}

fn def(source: ParquetSource) -> DatasetDef {
    DatasetDef { stages: vec![Stage::Parquet(source)] }
}

fn resolved(source: ParquetSource) -> DatasetDef {
    let mut d = def(source);
    d.resolve_files().expect("the footers are read");
    d
}

fn id_of(e: &Element) -> i64 {
    e.get("id").expect("an id column").as_i64().expect("an int64 scalar")
}

fn ok_ids(items: &[Result<Element, DatasetError>]) -> Vec<i64> {
    items.iter().map(|r| id_of(r.as_ref().expect("no error"))).collect()
}

#[test]
fn rows_become_named_tensors_of_their_columns_types() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tokens = ListBuilder::new(Int32Builder::new());
    tokens.append_value([Some(1), Some(2), Some(3)]);
    tokens.append_value([]);
    let image = StructArray::from(vec![
        (
            Arc::new(Field::new("bytes", DataType::Binary, false)),
            Arc::new(BinaryArray::from_iter_values([b"\xff\xd8a".as_slice(), b"\xff\xd8b"]))
                as ArrayRef,
        ),
        (
            Arc::new(Field::new("path", DataType::Utf8, false)),
            Arc::new(StringArray::from(vec!["a.jpg", "b.jpg"])) as ArrayRef,
        ),
    ]);
    let file = write(
        dir.path(),
        "t.parquet",
        vec![
            ("flag", Arc::new(BooleanArray::from(vec![true, false])) as ArrayRef),
            ("small", Arc::new(Int8Array::from(vec![-3, 4]))),
            ("big", Arc::new(UInt64Array::from(vec![7, 8]))),
            ("f", Arc::new(Float32Array::from(vec![0.5, 1.5]))),
            ("d", Arc::new(Float64Array::from(vec![2.25, -1.0]))),
            ("text", Arc::new(StringArray::from(vec!["héllo", ""]))),
            ("tokens", Arc::new(tokens.finish())),
            ("image", Arc::new(image)),
        ],
        1,
    );
    let out = common::run(&resolved(source(vec![file])));
    let rows: Vec<Element> = out.into_iter().map(|r| r.expect("no error")).collect();
    let names: Vec<&str> =
        rows[0].names.as_deref().expect("named").iter().map(String::as_str).collect();
    assert_eq!(
        names,
        ["flag", "small", "big", "f", "d", "text", "tokens", "image.bytes", "image.path"],
        "components in the file's column order, struct fields flattened"
    );
    let dtypes: Vec<&str> = rows[0].components.iter().map(|t| t.dtype().name()).collect();
    assert_eq!(
        dtypes,
        ["bool", "int32", "int64", "float32", "float64", "string", "int32", "bytes", "string"]
    );
    assert_eq!(
        rows.iter().map(Element::to_json).collect::<Vec<_>>(),
        [
            json!({"flag": true, "small": -3, "big": 7, "f": 0.5, "d": 2.25, "text": "héllo",
                   "tokens": [1, 2, 3], "image.bytes": "\u{fffd}\u{fffd}a", "image.path": "a.jpg"}),
            json!({"flag": false, "small": 4, "big": 8, "f": 1.5, "d": -1.0, "text": "",
                   "tokens": [], "image.bytes": "\u{fffd}\u{fffd}b", "image.path": "b.jpg"}),
        ]
    );
    assert_eq!(rows[0].components[6].shape(), [3], "a list is a 1-D tensor");
    assert_eq!(rows[0].components[0].shape(), [] as [u64; 0], "a value is a scalar");
}

#[test]
fn only_the_named_columns_are_read_in_the_order_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = ids(dir.path(), "a.parquet", 0, 5, 2);
    let mut s = source(vec![file]);
    s.columns = vec!["text".into(), "id".into()];
    let out = common::run(&resolved(s));
    let e = out[4].as_ref().expect("no error");
    assert_eq!(e.names.as_deref().expect("named"), ["text".to_string(), "id".to_string()]);
    assert_eq!(e.to_json(), json!({"text": "row 4", "id": 4}));
}

#[test]
fn the_split_unit_is_a_row_group_across_files_and_only_split_groups_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 7 rows in groups of 3 (3 groups), then 4 rows in groups of 2 (2 groups).
    let files =
        vec![ids(dir.path(), "a.parquet", 0, 7, 3), ids(dir.path(), "b.parquet", 100, 4, 2)];
    let d = resolved(source(files));
    let Stage::Parquet(p) = &d.stages[0] else { panic!("a parquet stage") };
    assert_eq!(p.row_groups, Some(vec![3, 2]));
    assert_eq!(d.source_cardinality(), Some(5));
    d.check_dynamic().expect("DYNAMIC can split a resolved source");
    let splits = common::Splits(vec![(4, 5, vec![]), (1, 3, vec![])], vec![]);
    let out: Vec<_> = d
        .iter_with_splits(&FunctionRegistry::builtin(), Box::new(splits))
        .expect("starts")
        .collect();
    assert_eq!(ok_ids(&out), [102, 103, 3, 4, 5, 6]);
    // The resolved definition survives its JSON form.
    assert_eq!(DatasetDef::from_json(&d.to_json()).expect("parses"), d);
}

fn drain(tagged: TaggedIter) -> Vec<(i64, u64, u64)> {
    let TaggedIter { elements, .. } = tagged;
    elements
        .map(|item| {
            let mut e = item.expect("no error");
            let origin = e.origin.take().expect("an origin").into_origin();
            let run = origin.runs[0];
            (id_of(&e), run.unit, run.first)
        })
        .collect()
}

#[test]
fn origins_are_row_group_and_row_and_consumed_rows_are_skipped_mid_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files =
        vec![ids(dir.path(), "a.parquet", 0, 7, 3), ids(dir.path(), "b.parquet", 100, 4, 2)];
    let d = resolved(source(files));
    let all = drain(d.iter_tagged(&FunctionRegistry::builtin(), None).expect("starts"));
    let want: Vec<(i64, u64, u64)> = vec![
        (0, 0, 0),
        (1, 0, 1),
        (2, 0, 2),
        (3, 1, 0),
        (4, 1, 1),
        (5, 1, 2),
        (6, 2, 0),
        (100, 3, 0),
        (101, 3, 1),
        (102, 4, 0),
        (103, 4, 1),
    ];
    assert_eq!(all, want, "(id, unit = row group across files, record = row in the group)");

    // A restore: rows 0 and 2 of group 1 and row 1 of group 3 were delivered.
    let skips = vec![Run::record(1, 0), Run::record(1, 2), Run::record(3, 1)];
    let splits = common::Splits(vec![(1, 4, skips)], vec![]);
    let tagged = d.iter_tagged(&FunctionRegistry::builtin(), Some(Box::new(splits)));
    let got: Vec<i64> = drain(tagged.expect("starts")).iter().map(|r| r.0).collect();
    assert_eq!(got, [4, 6, 100]);
}

fn with_nulls(dir: &std::path::Path) -> String {
    let id = Int64Array::from_iter_values(0..4);
    let label = Int64Array::from(vec![Some(1), None, Some(3), None]);
    let mut tags = ListBuilder::new(StringBuilder::new());
    tags.append_value([Some("a")]);
    tags.append_value([Some("b")]);
    tags.append(false);
    tags.append_value([Some("d")]);
    write(
        dir,
        "nulls.parquet",
        vec![("id", Arc::new(id)), ("label", Arc::new(label)), ("tags", Arc::new(tags.finish()))],
        2,
    )
}

#[test]
fn a_null_is_an_element_error_naming_file_group_row_and_column_unless_defaulted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = with_nulls(dir.path());
    let out = common::run(&resolved(source(vec![file.clone()])));
    assert_eq!(out.len(), 4);
    assert_eq!(id_of(out[0].as_ref().expect("row 0 is whole")), 0);
    let err = out[1].as_ref().expect_err("row 1's label is null");
    assert!(err.is_element_error(), "{err}");
    let msg = err.to_string();
    for says in
        [file.as_str(), "row group 0, row 1", "`label` is null", "defaults", "ignore_errors"]
    {
        assert!(msg.contains(says), "{msg:?} should say {says:?}");
    }
    let msg = out[2].as_ref().expect_err("row 2's list is null").to_string();
    assert!(msg.contains("row group 1, row 0") && msg.contains("`tags`"), "{msg}");

    // ignore_errors skips and counts them; the rows after them still come.
    let registry = FunctionRegistry::builtin();
    let skipped =
        common::run_with(&resolved(source(vec![file.clone()])).ignore_errors(), &registry);
    assert_eq!(ok_ids(&skipped), [0]);
    assert_eq!(registry.errors_ignored().load(Ordering::Relaxed), 3);

    // A default fills the label's nulls; `tags` is left out.
    let mut s = source(vec![file]);
    s.columns = vec!["id".into(), "label".into()];
    s.defaults.insert("label".into(), Arg::Int(-1));
    let labels: Vec<i64> = common::run(&resolved(s))
        .into_iter()
        .map(|r| r.expect("no nulls left").get("label").expect("label").as_i64().expect("int"))
        .collect();
    assert_eq!(labels, [1, -1, 3, -1]);
}

#[test]
fn batch_rows_makes_elements_of_up_to_that_many_rows_of_one_row_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tokens = ListBuilder::new(Int32Builder::new());
    for i in 0..5 {
        tokens.append_value([Some(i), Some(i * 10)]);
    }
    let id = Int64Array::from_iter_values(0..5);
    let file = write(
        dir.path(),
        "b.parquet",
        vec![("id", Arc::new(id)), ("tokens", Arc::new(tokens.finish()))],
        3,
    );
    let mut s = source(vec![file]);
    s.batch_rows = Some(2);
    let out: Vec<serde_json::Value> = common::json(&resolved(s));
    assert_eq!(
        out,
        [
            json!({"id": [0, 1], "tokens": [[0, 0], [1, 10]]}),
            json!({"id": [2], "tokens": [[2, 20]]}),
            json!({"id": [3, 4], "tokens": [[3, 30], [4, 40]]}),
        ],
        "a batch never spans row groups (groups of 3 rows)"
    );
}

#[test]
fn lists_of_unequal_lengths_in_one_batch_are_a_row_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut tokens = ListBuilder::new(Int32Builder::new());
    tokens.append_value([Some(1)]);
    tokens.append_value([Some(1), Some(2)]);
    let file =
        write(dir.path(), "r.parquet", vec![("tokens", Arc::new(tokens.finish()) as ArrayRef)], 8);
    let mut s = source(vec![file]);
    s.batch_rows = Some(2);
    let out = common::run(&resolved(s));
    let msg = out[0].as_ref().expect_err("ragged").to_string();
    assert!(msg.contains("different lengths") && msg.contains("batch_rows"), "{msg}");
}

#[test]
fn a_missing_column_an_unsupported_type_and_a_bad_default_are_refused_naming_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(
        dir.path(),
        "d.parquet",
        vec![
            ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("day", Arc::new(Date32Array::from(vec![19000]))),
        ],
        8,
    );
    let refused = |s: ParquetSource, says: &[&str]| {
        let msg = def(s).resolve_files().expect_err("refused").to_string();
        for w in says {
            assert!(msg.contains(w), "{msg:?} should say {w:?}");
        }
    };
    let mut s = source(vec![file.clone()]);
    s.columns = vec!["id".into(), "label".into()];
    refused(s, &[&file, "no column `label`", "id, day"]);
    refused(source(vec![file.clone()]), &[&file, "`day`", "Date32", "columns"]);
    let mut s = source(vec![file.clone()]);
    s.columns = vec!["id".into()];
    s.defaults.insert("id".into(), Arg::Str("x".into()));
    refused(s, &["defaults.id", "int64"]);
    let mut s = source(vec![file.clone()]);
    s.columns = vec!["id".into()];
    s.defaults.insert("nope".into(), Arg::Int(1));
    refused(s, &["`nope`", "not a component"]);
    // The projection that leaves the date out reads.
    let mut s = source(vec![file]);
    s.columns = vec!["id".into()];
    assert_eq!(ok_ids(&common::run(&resolved(s))), [1]);
}

#[test]
fn files_of_other_columns_and_corrupt_footers_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = ids(dir.path(), "a.parquet", 0, 3, 2);
    let other = write(
        dir.path(),
        "o.parquet",
        vec![("id", Arc::new(Float64Array::from(vec![1.0])) as ArrayRef)],
        8,
    );
    let msg = def(source(vec![good.clone(), other.clone()]))
        .resolve_files()
        .expect_err("differ")
        .to_string();
    assert!(msg.contains(&other) && msg.contains("other columns"), "{msg}");

    let bytes = std::fs::read(&good).expect("read");
    for (name, damaged) in [
        ("cut.parquet", bytes[..bytes.len() - 5].to_vec()),
        ("garbage.parquet", b"not a parquet file at all".to_vec()),
        ("lying.parquet", {
            // The footer claims more metadata than the file holds.
            let mut b = bytes.clone();
            let n = b.len();
            b[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
            b
        }),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, damaged).expect("write");
        let path = path.to_string_lossy().into_owned();
        let err = def(source(vec![path.clone()])).resolve_files().expect_err("refused");
        let msg = err.to_string();
        assert!(msg.contains(&path) && msg.contains("Parquet footer"), "{name}: {msg}");
        // Read without a dispatcher, the local run says the same.
        let out = def(source(vec![path])).iter_local(&FunctionRegistry::builtin()).err();
        assert!(out.is_some_and(|e| e.to_string().contains("Parquet footer")), "{name}");
    }
}

#[test]
fn a_pattern_is_listed_and_file_sharding_keeps_whole_files_with_their_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    ids(dir.path(), "p-0.parquet", 0, 4, 2);
    ids(dir.path(), "p-1.parquet", 10, 3, 1);
    ids(dir.path(), "p-2.parquet", 20, 2, 2);
    let s = ParquetSource {
        pattern: Some(format!("{}/p-*.parquet", dir.path().display())),
        ..Default::default()
    };
    // Locally, without a dispatcher, the source resolves itself.
    assert_eq!(ok_ids(&common::run(&def(s.clone()))), [0, 1, 2, 3, 10, 11, 12, 20, 21]);
    assert!(def(s.clone()).check_dynamic().is_err(), "unresolved, DYNAMIC is refused");
    let d = resolved(s);
    let w1 = d.for_worker(StaticPolicy::File, 2, 1).expect("shards");
    let Stage::Parquet(p) = &w1.stages[0] else { panic!("a parquet stage") };
    assert_eq!(p.row_groups, Some(vec![3]));
    assert_eq!(ok_ids(&common::run(&w1)), [10, 11, 12]);
}

#[test]
fn specs_that_cannot_work_are_refused_by_field() {
    let refused = |json: &str, says: &str| {
        let msg = DatasetDef::from_json(json).expect_err("refused").to_string();
        assert!(msg.contains(says), "{json}: {msg:?} should say {says:?}");
    };
    refused(r#"{"stages":[{"parquet":{}}]}"#, "name at least one file");
    refused(r#"{"stages":[{"parquet":{"files":["a"],"pattern":"b*"}}]}"#, "not both");
    refused(r#"{"stages":[{"parquet":{"files":["a"],"batch_rows":0}}]}"#, "batch_rows");
    refused(r#"{"stages":[{"parquet":{"files":["a"],"batch_rows":100000000}}]}"#, "MAX_BATCH_SIZE");
    refused(r#"{"stages":[{"parquet":{"files":["a"],"columns":["x","x"]}}]}"#, "named twice");
    refused(r#"{"stages":[{"parquet":{"files":["a"],"row_groups":[1,2]}}]}"#, "one count per file");
    refused(r#"{"stages":[{"parquet":{"files":["a"],"colums":["x"]}}]}"#, "colums");
}

/// Ids 0..10, `label` null at ids 3 and 7.
fn two_bad_rows(dir: &std::path::Path) -> String {
    let id = Int64Array::from_iter_values(0..10);
    let label: Int64Array = (0..10).map(|i| (i % 4 != 3).then_some(i)).collect();
    write(dir, "bad.parquet", vec![("id", Arc::new(id)), ("label", Arc::new(label))], 4)
}

#[test]
fn a_bad_row_passes_through_a_parallel_map_in_position_and_ignore_errors_skips_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = two_bad_rows(dir.path());
    let def = resolved(source(vec![file])).parallel_map("identity", vec![], 3);
    let out = common::run(&def);
    let shape: Vec<Option<i64>> = out.iter().map(|r| r.as_ref().ok().map(id_of)).collect();
    let want = [Some(0), Some(1), Some(2), None, Some(4), Some(5), Some(6), None, Some(8), Some(9)];
    assert_eq!(shape, want, "each bad row in its place, the rows after it still come");
    assert!(out.iter().filter_map(|r| r.as_ref().err()).all(DatasetError::is_element_error));

    let registry = FunctionRegistry::builtin();
    let mut unordered = def.clone();
    if let Some(Stage::Map { deterministic, .. }) = unordered.stages.last_mut() {
        *deterministic = false;
    }
    let skipped = common::run_with(&unordered.ignore_errors(), &registry);
    let mut ids = ok_ids(&skipped);
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2, 4, 5, 6, 8, 9]);
    assert_eq!(registry.errors_ignored().load(Ordering::Relaxed), 2);
}
