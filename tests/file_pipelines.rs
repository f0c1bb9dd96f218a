//! File pipelines through the service: TFRecord sources split per file under
//! DYNAMIC, the demo's image preprocessing, corrupt records, and files in a real
//! S3-compatible bucket (moto). The local executor is the oracle.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{Cluster, DEADLINE};
use futures::StreamExt;
use sluice_client::{ClientError, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::formats::tfrecord::TfRecordWriter;
use sluice_dataset::io::DataRoots;
use sluice_dataset::{DatasetDef, Element, FunctionRegistry, Stage};
use sluice_dispatcher::DispatcherConfig;
use sluice_journal::testing::MotoServer;
use sluice_worker::WorkerConfig;

fn opts(mode: ProcessingMode) -> ReadOptions {
    ReadOptions::new(mode).worker_retry(RetryPolicy::for_tests())
}

/// Writes `files` TFRecord files of `records` records each (`f<i>-r<j>`) through
/// the dataset crate's file layer (a path or a bucket URL); returns their names.
fn write_records(dir: &str, files: usize, records: usize) -> Vec<String> {
    (0..files)
        .map(|i| {
            let name = format!("{dir}/part-{i:02}.tfrecord");
            let mut w = TfRecordWriter::new(sluice_dataset::io::create(&name).expect("create"));
            for j in 0..records {
                w.write(format!("f{i}-r{j}").as_bytes()).expect("write");
            }
            w.into_inner().finish().expect("finish");
            name
        })
        .collect()
}

fn text_of(e: &Element) -> String {
    let item = e.components[0].items().expect("a bytes scalar").remove(0);
    String::from_utf8_lossy(&item).into_owned()
}

/// Reads to the end; every element must arrive.
async fn read_all(mut stream: ElementStream) -> Vec<Element> {
    let mut out = vec![];
    let read = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            out.push(e.expect("element"));
        }
    });
    read.await.expect("the read ends before the deadline");
    out
}

/// Reads until the first error, which it returns.
async fn first_error(mut stream: ElementStream) -> (Vec<Element>, ClientError) {
    let mut out = vec![];
    let read = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            match e {
                Ok(e) => out.push(e),
                Err(e) => return Some(e),
            }
        }
        None
    });
    let err = read.await.expect("the read ends before the deadline").expect("an error");
    (out, err)
}

fn local(def: &DatasetDef) -> Vec<Element> {
    def.iter_local(&FunctionRegistry::builtin()).unwrap().map(|e| e.unwrap()).collect()
}

fn sorted_texts(elements: &[Element]) -> Vec<String> {
    let mut v: Vec<String> = elements.iter().map(text_of).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_over_tfrecord_files_reads_every_record_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    write_records(dir, 5, 5);
    let cluster = Cluster::start(3).await;
    cluster.wait_workers(3).await;
    // `list_files` is resolved by the dispatcher at registration: the file list,
    // and so the order of the splits (one file each), is replicated state.
    let def = DatasetDef::list_files(&format!("{dir}/*.tfrecord")).flat_map("tfrecord", vec![]);
    let got =
        read_all(cluster.client().distribute(&def, opts(ProcessingMode::Dynamic)).await.unwrap())
            .await;
    let expected: Vec<String> = {
        let mut v: Vec<String> =
            (0..5).flat_map(|i| (0..5).map(move |j| format!("f{i}-r{j}"))).collect();
        v.sort();
        v
    };
    assert_eq!(sorted_texts(&got), expected, "all 25 records, each exactly once");
    assert_eq!(sorted_texts(&local(&def)), expected, "the local oracle agrees");

    // The same through a `tfrecord` source naming the files.
    let files: Vec<String> = (0..5).map(|i| format!("{dir}/part-{i:02}.tfrecord")).collect();
    let def = DatasetDef::tfrecord(files);
    let got =
        read_all(cluster.client().distribute(&def, opts(ProcessingMode::Dynamic)).await.unwrap())
            .await;
    assert_eq!(sorted_texts(&got), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_a_file_records_keep_their_order_under_dynamic_sharding() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let files = write_records(dir, 4, 20);
    let cluster = Cluster::start(2).await;
    cluster.wait_workers(2).await;
    let def = DatasetDef::tfrecord(files);
    let mut stream =
        cluster.client().distribute(&def, opts(ProcessingMode::Dynamic)).await.unwrap();
    // Per worker, a file's records arrive in file order (a split is a whole file).
    let mut per_worker: BTreeMap<String, Vec<String>> = BTreeMap::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some(r) = stream.next_with_source().await {
            let (worker, e) = r.expect("element");
            per_worker.entry(worker.to_string()).or_default().push(text_of(&e));
        }
    })
    .await
    .expect("the read ends before the deadline");
    let mut total = 0;
    for records in per_worker.values() {
        total += records.len();
        let mut by_file: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for r in records {
            let (file, rec) = r.split_once('-').unwrap();
            by_file.entry(file).or_default().push(rec[1..].parse().unwrap());
        }
        for (file, recs) in by_file {
            assert_eq!(recs, (0..20).collect::<Vec<_>>(), "file {file} whole and in order");
        }
    }
    assert_eq!(total, 80);
}

/// Flips one byte inside the data of record `record` of a file written by
/// `write_records` (records `fI-rJ` are short: 16 header bytes, data, 4 CRC bytes).
fn corrupt(path: &Path, record: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let mut offset = 0usize;
    for _ in 0..record {
        let len = u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap()) as usize;
        offset += 12 + len + 4;
    }
    bytes[offset + 12] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_fails_the_read_naming_the_file_and_offset_or_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_records(dir.path().to_str().unwrap(), 2, 4);
    corrupt(Path::new(&files[1]), 2);
    let cluster = Cluster::start(1).await;
    cluster.wait_workers(1).await;

    let def = DatasetDef::tfrecord(files.clone());
    let stream = cluster.client().distribute(&def, opts(ProcessingMode::Off)).await.unwrap();
    let (before, err) = first_error(stream).await;
    let msg = err.to_string();
    assert!(msg.contains(&files[1]) && msg.contains("byte"), "names file and offset: {msg}");
    assert!(msg.contains("skip_corrupt"), "says what to do: {msg}");
    // Everything before the bad record arrived, in order.
    let expected: Vec<String> =
        ["f0-r0", "f0-r1", "f0-r2", "f0-r3", "f1-r0", "f1-r1"].map(String::from).to_vec();
    assert_eq!(before.iter().map(text_of).collect::<Vec<_>>(), expected);

    let def = DatasetDef { stages: vec![Stage::TfRecord { files, skip_corrupt: true }] };
    let got =
        read_all(cluster.client().distribute(&def, opts(ProcessingMode::Off)).await.unwrap()).await;
    let texts: Vec<String> = got.iter().map(text_of).collect();
    assert_eq!(texts.len(), 7, "all but the corrupt record: {texts:?}");
    assert!(!texts.contains(&"f1-r2".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_pipeline_through_the_service_matches_the_local_run() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap();
    let summary = sluice_dataset::sample::write_image_dataset(dir, 4, 5, 24, 7).unwrap();
    assert_eq!(summary.records, 20);
    let def = sluice_dataset::sample::image_pipeline(&format!("{dir}/*.tfrecord"), 24);
    let cluster = Cluster::start(2).await;
    cluster.wait_workers(2).await;
    let got =
        read_all(cluster.client().distribute(&def, opts(ProcessingMode::Dynamic)).await.unwrap())
            .await;
    // Batches differ with the split assignment; the multiset of (label, image) does not.
    let unbatch = |elements: &[Element]| {
        let mut rows: Vec<(i64, Vec<u8>)> = vec![];
        for e in elements {
            let labels = e.get("label").expect("label").i64_values().unwrap();
            let image = e.get("image").expect("image");
            assert_eq!(image.shape()[1..], [16, 16, 3], "cropped to 16x16 RGB");
            let per = image.data().len() / labels.len();
            for (i, l) in labels.iter().enumerate() {
                rows.push((*l, image.data()[i * per..(i + 1) * per].to_vec()));
            }
        }
        rows.sort();
        rows
    };
    let (service, oracle) = (unbatch(&got), unbatch(&local(&def)));
    assert_eq!(service.len(), 20);
    assert!(service == oracle, "the service's images and labels equal the local run's");
}

fn moto() -> Arc<MotoServer> {
    MotoServer::in_process_env()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tfrecord_files_in_a_bucket_are_listed_split_and_read_by_workers() {
    let server = moto();
    let base = format!("s3://{}/train", server.bucket());
    let b = base.clone();
    tokio::task::spawn_blocking(move || write_records(&b, 3, 4)).await.unwrap();
    // Objects are read only where the data roots say (nothing by default).
    let roots = DataRoots::parse(&format!("s3://{}/train", server.bucket())).unwrap();
    let config = DispatcherConfig { data_roots: Some(roots.clone()), ..Default::default() };
    let mut cluster = Cluster::start_with(0, config).await;
    for _ in 0..2 {
        let mut config = WorkerConfig::for_tests(cluster.addresses());
        config.data_roots = Some(roots.clone());
        cluster.add_worker_with(config).await;
    }
    cluster.wait_workers(2).await;
    let def = DatasetDef::list_files(&format!("{base}/*.tfrecord")).flat_map("tfrecord", vec![]);
    let got =
        read_all(cluster.client().distribute(&def, opts(ProcessingMode::Dynamic)).await.unwrap())
            .await;
    let mut expected: Vec<String> =
        (0..3).flat_map(|i| (0..4).map(move |j| format!("f{i}-r{j}"))).collect();
    expected.sort();
    assert_eq!(sorted_texts(&got), expected);

    // A pattern that matches nothing is refused at registration, naming it.
    let bad = DatasetDef::list_files(&format!("{base}/*.csv"));
    let err = cluster.client().register_dataset(&bad, None).await.expect_err("no files");
    assert!(err.to_string().contains("*.csv"), "{err}");

    // The root `s3://B/train` does not admit `s3://B/train-secret/…`.
    let secret = format!("s3://{}/train-secret/part-0.tfrecord", server.bucket());
    let def = DatasetDef {
        stages: vec![Stage::TfRecord { files: vec![secret.clone()], skip_corrupt: false }],
    };
    let err = cluster.client().register_dataset(&def, None).await.expect_err("outside the root");
    assert!(err.to_string().contains(&secret) && err.to_string().contains("--data-roots"), "{err}");
}
