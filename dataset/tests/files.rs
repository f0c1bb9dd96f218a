//! Local file sources: list_files, text_lines, tfrecord, their split units, and
//! the io module's create/open.

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use sluice_dataset::formats::tfrecord::TfRecordWriter;
use sluice_dataset::{
    io, DatasetDef, DatasetError, Element, FunctionRegistry, SplitProvider, SplitRange, Stage,
};

fn touch(dir: &std::path::Path, name: &str, content: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    std::fs::write(&path, content).expect("write");
    path.to_string_lossy().into_owned()
}

/// Writes `records` as a TFRecord file through `io::create`.
fn write_tfrecord(url: &str, records: &[String]) {
    let mut w = TfRecordWriter::new(io::create(url).expect("create"));
    for r in records {
        w.write(r.as_bytes()).expect("write");
    }
    w.into_inner().finish().expect("finish");
}

/// Three TFRecord files `f0..f2`, file `i` holding `"i-0"`, `"i-1"`, … (`i + 2` records).
fn three_tfrecord_files(dir: &std::path::Path) -> Vec<String> {
    (0..3)
        .map(|i| {
            let url = dir.join(format!("f{i}.tfrecord")).to_string_lossy().into_owned();
            write_tfrecord(&url, &(0..i + 2).map(|j| format!("{i}-{j}")).collect::<Vec<_>>());
            url
        })
        .collect()
}

fn strings(items: Vec<Result<Element, DatasetError>>) -> Vec<String> {
    items
        .into_iter()
        .map(|r| {
            let e = r.expect("no element fails");
            let t = &e.components[0];
            assert!(t.shape().is_empty(), "a scalar");
            let item = t.items().expect("string or bytes").remove(0);
            String::from_utf8(item.to_vec()).expect("utf-8")
        })
        .collect()
}

/// Hands out fixed splits, then the end of the epoch.
struct Fixed(Arc<Mutex<Vec<(u64, u64)>>>);

impl SplitProvider for Fixed {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        let mut splits = self.0.lock().expect("lock");
        Ok((!splits.is_empty())
            .then(|| splits.remove(0))
            .map(|(begin, end)| SplitRange { begin, end }))
    }
    fn reset(&mut self) -> Result<(), DatasetError> {
        Ok(())
    }
}

fn with_splits(def: &DatasetDef, splits: Vec<(u64, u64)>) -> Vec<Result<Element, DatasetError>> {
    def.iter_with_splits(
        &FunctionRegistry::builtin(),
        Box::new(Fixed(Arc::new(Mutex::new(splits)))),
    )
    .expect("starts")
    .collect()
}

#[test]
fn list_files_globs_sorted_in_the_pattern_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["b.txt", "a.txt", "c.log", "ab.txt", "sub/d.txt"] {
        touch(dir.path(), name, b"x");
    }
    std::fs::create_dir(dir.path().join("e.txt")).expect("a directory that matches");
    let d = dir.path().to_string_lossy().into_owned();
    let names = |pattern: &str| -> Vec<String> {
        io::list_files(pattern)
            .expect("matches")
            .into_iter()
            .map(|f| f.rsplit('/').next().expect("a name").to_string())
            .collect()
    };
    assert_eq!(names(&format!("{d}/*.txt")), ["a.txt", "ab.txt", "b.txt"]);
    assert_eq!(names(&format!("{d}/?.txt")), ["a.txt", "b.txt"]);
    assert_eq!(names(&format!("{d}/[bc].*")), ["b.txt", "c.log"]);
    assert_eq!(names(&format!("{d}/*/d.txt")), ["d.txt"]);
    assert_eq!(names(&format!("{d}/c.log")), ["c.log"]);
    let urls = io::list_files(&format!("file://{d}/a*.txt")).expect("matches");
    assert_eq!(urls, [format!("file://{d}/a.txt"), format!("file://{d}/ab.txt")]);

    let err = io::list_files(&format!("{d}/*.csv")).expect_err("nothing matches");
    assert!(err.to_string().contains(&format!("no files match `{d}/*.csv`")), "{err}");
    let err = io::list_files("ftp://host/x").expect_err("unsupported");
    assert!(err.to_string().contains("unsupported scheme"), "{err}");
}

#[test]
fn list_files_shuffle_is_deterministic_per_seed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sorted: Vec<String> =
        (0..12).map(|i| touch(dir.path(), &format!("{i:02}.rec"), b"")).collect();
    sorted.sort();
    let pattern = format!("{}/*.rec", dir.path().display());
    let resolve = |shuffle: bool, seed: u64| -> Vec<String> {
        let mut def = DatasetDef {
            stages: vec![Stage::ListFiles { pattern: pattern.clone(), shuffle, seed, files: None }],
        };
        def.resolve_files().expect("resolves");
        match &def.stages[0] {
            Stage::ListFiles { files: Some(f), .. } => f.clone(),
            other => panic!("not resolved: {other:?}"),
        }
    };
    assert_eq!(resolve(false, 0), sorted);
    let a = resolve(true, 7);
    assert_eq!(a, resolve(true, 7), "same seed, same order");
    assert_ne!(a, resolve(true, 8), "another seed, another order");
    assert_ne!(a, sorted);
    let mut again = a.clone();
    again.sort();
    assert_eq!(again, sorted, "a permutation");
}

#[test]
fn resolve_files_reaches_nested_pipelines_and_keeps_resolved_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    touch(dir.path(), "x.txt", b"1\n");
    let pattern = format!("{}/*.txt", dir.path().display());
    let kept = Stage::ListFiles {
        pattern: "/nowhere/*".into(),
        shuffle: false,
        seed: 0,
        files: Some(vec!["kept".into()]),
    };
    let mut def = DatasetDef { stages: vec![kept.clone()] }
        .zip(vec![DatasetDef::list_files(&pattern)])
        .concatenate(DatasetDef::list_files(&pattern));
    assert!(def.has_unresolved_files());
    def.resolve_files().expect("resolves");
    assert!(!def.has_unresolved_files());
    assert_eq!(def.stages[0], kept);
    let json = serde_json::to_string(&def).expect("json");
    assert_eq!(json.matches("x.txt").count(), 2, "{json}");
}

#[test]
fn list_files_source_yields_the_names_locally_and_by_split() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files: Vec<String> = ["a", "b", "c"].iter().map(|n| touch(dir.path(), n, b"")).collect();
    let def = DatasetDef::list_files(&format!("{}/*", dir.path().display()));
    assert_eq!(strings(common::run(&def)), files, "resolved at start when run locally");

    let err = def
        .iter_with_splits(&FunctionRegistry::builtin(), Box::new(Fixed(Arc::default())))
        .err()
        .expect("a worker's copy must come resolved");
    assert!(err.to_string().contains("not resolved"), "{err}");

    let mut resolved = def.clone();
    resolved.resolve_files().expect("resolves");
    assert_eq!(resolved.source_cardinality(), Some(3));
    assert_eq!(
        strings(with_splits(&resolved, vec![(2, 3), (0, 1)])),
        [files[2].clone(), files[0].clone()]
    );
}

#[test]
fn text_lines_streams_lines_without_endings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = touch(dir.path(), "a.txt", b"one\r\ntwo\n\nfour");
    let b = touch(dir.path(), "b.txt", b"");
    let c = touch(dir.path(), "c.txt", b"last\n");
    let def = DatasetDef::text_lines(vec![a, b, c]);
    assert_eq!(strings(common::run(&def)), ["one", "two", "", "four", "last"]);
    assert_eq!(strings(with_splits(&def, vec![(1, 3)])), ["last"]);
}

#[test]
fn tfrecord_source_reads_files_in_order_and_only_the_split_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = three_tfrecord_files(dir.path());
    let def = DatasetDef::tfrecord(files.clone());
    assert_eq!(
        strings(common::run(&def)),
        ["0-0", "0-1", "1-0", "1-1", "1-2", "2-0", "2-1", "2-2", "2-3"]
    );
    // A split is a range of files: [2, 3) then [0, 1).
    assert_eq!(
        strings(with_splits(&def, vec![(2, 3), (0, 1)])),
        ["2-0", "2-1", "2-2", "2-3", "0-0", "0-1"]
    );
    // Mixed with later stages.
    let batched = def.take(3).batch(3, false);
    assert_eq!(common::json(&batched), [serde_json::json!(["0-0", "0-1", "1-0"])]);
}

#[test]
fn tfrecord_source_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = three_tfrecord_files(dir.path());
    files.insert(1, dir.path().join("missing.tfrecord").to_string_lossy().into_owned());
    let out = common::run(&DatasetDef::tfrecord(files.clone()));
    assert_eq!(out.len(), 3, "two records, then the error ends the stream");
    let err = out[2].clone().expect_err("missing file");
    assert!(matches!(&err, DatasetError::NotFound { file, .. } if file == &files[1]), "{err:?}");

    // A corrupt record, skipped with skip_corrupt.
    let mut bytes = std::fs::read(&files[2]).expect("read");
    bytes[12] ^= 1; // first record's data
    std::fs::write(&files[2], &bytes).expect("write");
    files.remove(1);
    let out = common::run(&DatasetDef::tfrecord(files.clone()));
    let err = out.last().expect("items").clone().expect_err("corrupt");
    assert!(
        matches!(&err, DatasetError::Corrupt { file, offset: 0, .. } if file == &files[1]),
        "{err:?}"
    );
    let def = DatasetDef { stages: vec![Stage::TfRecord { files, skip_corrupt: true }] };
    assert_eq!(
        strings(common::run(&def)),
        ["0-0", "0-1", "1-1", "1-2", "2-0", "2-1", "2-2", "2-3"]
    );
}

#[test]
fn create_writes_under_a_temp_name_until_finish() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sub/out.bin").to_string_lossy().into_owned();
    let mut w = io::create(&path).expect("create");
    w.write_all(b"hello").expect("write");
    assert!(!std::path::Path::new(&path).exists(), "not visible before finish");
    w.finish().expect("finish");
    let mut back = String::new();
    io::open(&path).expect("open").read_to_string(&mut back).expect("read");
    assert_eq!(back, "hello");

    let abandoned = dir.path().join("abandoned").to_string_lossy().into_owned();
    let mut w = io::create(&abandoned).expect("create");
    w.write_all(b"x").expect("write");
    drop(w);
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("ls").collect();
    assert_eq!(left.len(), 1, "only `sub` remains: {left:?}");
    let err = io::open(&abandoned).err().expect("never written");
    assert!(err.to_string().contains(&abandoned), "{err}");
}
