//! File sources on a real S3-compatible server (moto, installed by
//! `scripts/install-s3-test-server.sh`; without it this test fails and says so).

mod common;

use std::io::Read;
use std::sync::Arc;

use sluice_dataset::formats::tfrecord::TfRecordWriter;
use sluice_dataset::{io, DatasetDef, Element};
use sluice_journal::testing::MotoServer;

fn moto() -> Arc<MotoServer> {
    MotoServer::in_process_env()
}

fn strings(items: Vec<Result<Element, sluice_dataset::DatasetError>>) -> Vec<String> {
    items
        .into_iter()
        .map(|r| {
            let item = r.expect("no element fails").components[0].items().expect("bytes").remove(0);
            String::from_utf8_lossy(&item).into_owned()
        })
        .collect()
}

#[test]
fn tfrecord_files_on_s3_list_and_read_back_through_the_executor() {
    let server = moto();
    let base = format!("s3://{}/dir", server.bucket());
    // Three TFRecord files (the last with a 3 MiB record: many streamed chunks), and
    // two objects the pattern must not match.
    for i in 0..3 {
        let url = format!("{base}/part-{i}.tfrecord");
        let mut w = TfRecordWriter::new(io::create(&url).expect("create"));
        for j in 0..2 {
            w.write(format!("{i}-{j}").as_bytes()).expect("write");
        }
        if i == 2 {
            w.write(&vec![b'z'; 3 << 20]).expect("write a big record");
        }
        w.into_inner().finish().expect("finish");
    }
    for other in ["dir/notes.txt", "dir/sub/part-9.tfrecord"] {
        let mut w = io::create(&format!("s3://{}/{other}", server.bucket())).expect("create");
        w.write_all(b"x").expect("write");
        w.finish().expect("finish");
    }

    let files = io::list_files(&format!("{base}/*.tfrecord")).expect("lists");
    assert_eq!(files, (0..3).map(|i| format!("{base}/part-{i}.tfrecord")).collect::<Vec<_>>());
    let err = io::list_files(&format!("{base}/*.csv")).expect_err("no match");
    assert!(err.to_string().contains("no files match"), "{err}");

    let mut text = String::new();
    io::open(&format!("s3://{}/dir/notes.txt", server.bucket()))
        .expect("open")
        .read_to_string(&mut text)
        .expect("read");
    assert_eq!(text, "x");
    let err = io::open(&format!("{base}/missing")).and_then(|mut r| {
        let mut buf = Vec::new();
        r.read_to_end(&mut buf).map_err(|e| sluice_dataset::DatasetError::io("read", e))
    });
    assert!(err.expect_err("missing").to_string().contains("missing"));

    // All records, in file order, through the executor.
    let out = strings(common::run(&DatasetDef::tfrecord(files.clone())));
    assert_eq!(out.len(), 7);
    assert_eq!(out[..6], ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]);
    assert_eq!(out[6].len(), 3 << 20);
    assert!(out[6].bytes().all(|b| b == b'z'));

    // list_files as the source, resolved at the start of a local run.
    let names =
        strings(common::run(&DatasetDef::list_files(&format!("{base}/part-[01].tfrecord"))));
    assert_eq!(names, files[..2]);
}

/// WebDataset shards written to a bucket by the sample writer (JPEGs and labels),
/// read back as samples, streamed from the object store.
#[test]
fn webdataset_shards_on_s3_read_back_as_samples() {
    let server = moto();
    let base = format!("s3://{}/wds", server.bucket());
    let summary = sluice_dataset::sample::write_webdataset(&base, 2, 3, 32, 5).expect("writes");
    assert_eq!(summary.records, 6);
    let files = io::list_files(&format!("{base}/*.tar")).expect("lists");
    assert_eq!(files, summary.files);
    let out = common::run(&DatasetDef::webdataset(files));
    let keys: Vec<String> = out
        .iter()
        .map(|r| {
            let e = r.as_ref().expect("no sample fails");
            let names = e.names.as_deref().expect("named");
            assert_eq!(names, ["__key__", "cls", "jpg"]);
            let jpeg = e.components[2].items().expect("bytes").remove(0);
            assert_eq!(jpeg[..2], [0xff, 0xd8], "a JPEG");
            let item = e.components[0].items().expect("string").remove(0);
            String::from_utf8_lossy(&item).into_owned()
        })
        .collect();
    assert_eq!(keys, ["000000", "000001", "000002", "000003", "000004", "000005"]);
}

/// Parquet files written to a bucket by the sample writer, listed by a pattern,
/// their footers read at resolution and their row groups fetched with ranged
/// GETs of only the projected columns; a split reads only its row groups.
#[test]
fn parquet_files_on_s3_resolve_and_read_by_row_group() {
    use sluice_dataset::formats::parquet::ParquetSource;
    use sluice_dataset::{FunctionRegistry, SplitProvider, SplitRange, Stage};

    let server = moto();
    let base = format!("s3://{}/pq", server.bucket());
    let summary = sluice_dataset::sample::write_parquet(&base, 2, 10, 4, 3).expect("writes");
    assert_eq!(summary.records, 20);
    let source = ParquetSource {
        pattern: Some(format!("{base}/*.parquet")),
        columns: vec!["id".into(), "label".into()],
        ..Default::default()
    };
    let mut def = DatasetDef { stages: vec![Stage::Parquet(source)] };
    def.resolve_files().expect("lists and reads the footers");
    let Stage::Parquet(p) = &def.stages[0] else { panic!("a parquet stage") };
    assert_eq!(p.files, summary.files);
    assert_eq!(p.row_groups, Some(vec![3, 3]), "10 rows in groups of 4");
    let ids = |items: Vec<Result<Element, sluice_dataset::DatasetError>>| -> Vec<i64> {
        items
            .into_iter()
            .map(|r| {
                let e = r.expect("no row fails");
                assert_eq!(e.names.as_deref().expect("named"), ["id", "label"]);
                e.get("id").expect("id").as_i64().expect("int64")
            })
            .collect()
    };
    assert_eq!(ids(common::run(&def)), (0..20).collect::<Vec<_>>());

    struct Once(Option<SplitRange>);
    impl SplitProvider for Once {
        fn next_split(&mut self) -> Result<Option<SplitRange>, sluice_dataset::DatasetError> {
            Ok(self.0.take())
        }
        fn reset(&mut self) -> Result<(), sluice_dataset::DatasetError> {
            Ok(())
        }
    }
    let split = Box::new(Once(Some(SplitRange { begin: 2, end: 4 })));
    let out: Vec<_> =
        def.iter_with_splits(&FunctionRegistry::builtin(), split).expect("starts").collect();
    assert_eq!(ids(out), [8, 9, 10, 11, 12, 13], "file 0's last group, file 1's first");
}
