//! Sharding among workers: the static policies (FILE, DATA, FILE_OR_DATA, HINT)
//! over the dispatcher's fixed worker list, DYNAMIC over files, local reads, and
//! the refusals, each naming what was wrong. Real gRPC on loopback; processes where
//! the behaviour is a process's (a refused worker exits, the CLI's errors).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{run_sluice, Cluster, Port, Proc, DEADLINE};
use sluice_client::TargetWorkers;
use sluice_client::{ClientError, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, Element, ShardArg};
use tonic::Code;

fn opts(mode: ProcessingMode) -> ReadOptions {
    ReadOptions::new(mode).worker_retry(RetryPolicy::for_tests())
}

/// Writes `n` text files of `lines` lines each; line `j` of file `f` is `f{f}-l{j}`.
fn write_text_files(dir: &Path, n: usize, lines: usize) -> Vec<String> {
    (0..n)
        .map(|f| {
            let path = dir.join(format!("f{f:02}.txt"));
            let text: String = (0..lines).map(|j| format!("f{f}-l{j}\n")).collect();
            std::fs::write(&path, text).unwrap();
            path.to_string_lossy().into_owned()
        })
        .collect()
}

/// The lines of the given files, in order, as `write_text_files` wrote them.
fn lines_of(files: impl IntoIterator<Item = usize>, lines: usize) -> Vec<String> {
    files.into_iter().flat_map(|f| (0..lines).map(move |j| format!("f{f}-l{j}"))).collect()
}

fn as_string(e: &Element) -> String {
    let items = e.components[0].items().expect("a string scalar");
    String::from_utf8(items[0].to_vec()).expect("utf-8")
}

fn as_i64(e: &Element) -> i64 {
    e.as_i64().expect("an int64 scalar")
}

/// Reads to the end; worker address → its elements, in the order they arrived.
async fn read_by_source<T>(
    mut stream: ElementStream,
    value: impl Fn(&Element) -> T,
) -> BTreeMap<String, Vec<T>> {
    let mut out: BTreeMap<String, Vec<T>> = BTreeMap::new();
    let read = tokio::time::timeout(DEADLINE, async {
        while let Some(r) = stream.next_with_source().await {
            let (source, e): (Arc<str>, Element) = r.expect("element");
            out.entry(source.to_string()).or_default().push(value(&e));
        }
    });
    read.await.expect("the read ends before the deadline");
    out
}

async fn next(stream: &mut ElementStream) -> Option<Result<(Arc<str>, Element), ClientError>> {
    let next = tokio::time::timeout(DEADLINE, stream.next_with_source());
    next.await.expect("an element or the end before the deadline")
}

async fn refusal(cluster: &Cluster, def: &DatasetDef, mode: ProcessingMode) -> ClientError {
    match cluster.client().distribute(def, opts(mode)).await {
        Err(e) => e,
        Ok(_) => panic!("{mode} over {def:?} was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_sharding_gives_worker_i_the_files_f_with_f_mod_n_equal_i_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_text_files(dir.path(), 10, 3);
    let cluster = Cluster::start_listed(5).await;
    let stream = cluster
        .client()
        .distribute(&DatasetDef::text_lines(files), opts(ProcessingMode::File))
        .await
        .unwrap();
    let got = read_by_source(stream, as_string).await;
    assert_eq!(got.len(), 5, "every listed worker produced its shard: {got:?}");
    for (i, w) in cluster.workers.iter().enumerate() {
        assert_eq!(got[w.address()], lines_of([i, i + 5], 3), "worker {i} at {}", w.address());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_files_is_resolved_at_registration_and_file_sharding_divides_the_listed_files() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_text_files(dir.path(), 10, 1);
    let cluster = Cluster::start_listed(5).await;
    let client = cluster.client();
    let pattern = format!("{}/f*.txt", dir.path().display());
    let id = client.register_dataset(&DatasetDef::list_files(&pattern), None).await.unwrap();
    tracing::info!("--- the registered definition holds the sorted file list");
    let registered = client.dispatcher().get_dataset(&id).await.unwrap();
    assert_eq!(registered.source_cardinality, Some(10));
    let stream = client.from_dataset_id(&id, opts(ProcessingMode::File)).await.unwrap();
    let got = read_by_source(stream, as_string).await;
    for (i, w) in cluster.workers.iter().enumerate() {
        let expected = vec![files[i].clone(), files[i + 5].clone()];
        assert_eq!(
            got[w.address()],
            expected,
            "worker {i} reads the names of files {i}, {}",
            i + 5
        );
    }
    tracing::info!("--- a pattern that cannot be listed is refused naming it");
    let missing = format!("{}/no-such-dir/*.txt", dir.path().display());
    let e = client.register_dataset(&DatasetDef::list_files(&missing), None).await.unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    assert!(e.to_string().contains("no-such-dir"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_sharding_gives_worker_i_the_elements_i_mod_n_in_order() {
    let cluster = Cluster::start_listed(5).await;
    let stream = cluster
        .client()
        .distribute(&DatasetDef::range(100), opts(ProcessingMode::Data))
        .await
        .unwrap();
    let got = read_by_source(stream, as_i64).await;
    for (i, w) in cluster.workers.iter().enumerate() {
        let expected: Vec<i64> = (i as i64..100).step_by(5).collect();
        assert_eq!(got[w.address()], expected, "worker {i} at {}", w.address());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_or_data_shards_files_by_file_and_a_range_by_element() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_text_files(dir.path(), 10, 3);
    let cluster = Cluster::start_listed(5).await;
    let client = cluster.client();

    tracing::info!("--- files: FILE (whole files per worker, not every fifth line)");
    let def = DatasetDef::text_lines(files);
    let stream = client.distribute(&def, opts(ProcessingMode::FileOrData)).await.unwrap();
    let got = read_by_source(stream, as_string).await;
    for (i, w) in cluster.workers.iter().enumerate() {
        assert_eq!(got[w.address()], lines_of([i, i + 5], 3), "worker {i}");
    }

    tracing::info!("--- range: DATA");
    let stream =
        client.distribute(&DatasetDef::range(50), opts(ProcessingMode::FileOrData)).await.unwrap();
    let got = read_by_source(stream, as_i64).await;
    for (i, w) in cluster.workers.iter().enumerate() {
        let expected: Vec<i64> = (i as i64..50).step_by(5).collect();
        assert_eq!(got[w.address()], expected, "worker {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hint_sharding_replaces_the_placeholder_with_each_workers_shard() {
    let cluster = Cluster::start_listed(2).await;
    let def = DatasetDef::range(20).shard(ShardArg::Hint, ShardArg::Hint);
    let stream = cluster.client().distribute(&def, opts(ProcessingMode::Hint)).await.unwrap();
    let got = read_by_source(stream, as_i64).await;
    for (i, w) in cluster.workers.iter().enumerate() {
        let expected: Vec<i64> = (i as i64..20).step_by(2).collect();
        assert_eq!(got[w.address()], expected, "worker {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_worker_restarts_its_static_shard_from_the_beginning() {
    let mut cluster = Cluster::start_listed(2).await;
    let w0 = cluster.workers[0].address().to_string();
    let mut stream = cluster
        .client()
        .distribute(&DatasetDef::range(20_000), opts(ProcessingMode::Data))
        .await
        .unwrap();
    let mut got: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    tracing::info!("--- read until worker 0 has delivered an element");
    while !got.contains_key(&w0) {
        let (source, e) = next(&mut stream).await.expect("not the end yet").unwrap();
        got.entry(source.to_string()).or_default().push(as_i64(&e));
    }
    tracing::info!("--- restart worker 0 mid-shard, read to the end");
    cluster.restart_worker(0).await;
    while let Some(r) = next(&mut stream).await {
        let (source, e) = r.unwrap();
        got.entry(source.to_string()).or_default().push(as_i64(&e));
    }
    let shard0 = &got[&w0];
    assert_eq!(shard0.iter().filter(|v| **v == 0).count(), 2, "shard 0 started over once");
    let mut distinct = shard0.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct, (0..20_000).step_by(2).collect::<Vec<i64>>(), "all of shard 0");
    let w1 = cluster.workers[1].address();
    assert_eq!(got[w1], (1..20_000).step_by(2).collect::<Vec<i64>>(), "shard 1 once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamic_sharding_over_text_files_hands_out_each_file_to_one_worker_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_text_files(dir.path(), 12, 4);
    let cluster = Cluster::start(3).await;
    let stream = cluster
        .client()
        .distribute(&DatasetDef::text_lines(files), opts(ProcessingMode::Dynamic))
        .await
        .unwrap();
    let got = read_by_source(stream, as_string).await;
    let mut all: Vec<String> = got.values().flatten().cloned().collect();
    all.sort();
    let mut expected = lines_of(0..12, 4);
    expected.sort();
    assert_eq!(all, expected, "every line exactly once");
    // A split is a whole file: each file's lines come from one worker, in order.
    for f in 0..12 {
        let owners: Vec<&String> = got
            .iter()
            .filter(|(_, lines)| lines.iter().any(|l| l.starts_with(&format!("f{f}-"))))
            .map(|(w, _)| w)
            .collect();
        assert_eq!(owners.len(), 1, "file {f} was read by {owners:?}");
        let in_order: Vec<&String> =
            got[owners[0]].iter().filter(|l| l.starts_with(&format!("f{f}-"))).collect();
        assert_eq!(in_order, lines_of([f], 4).iter().collect::<Vec<_>>(), "file {f}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_modes_refuse_what_they_cannot_divide_naming_the_numbers_and_op() {
    let dir = tempfile::tempdir().unwrap();
    let three_files = write_text_files(dir.path(), 3, 1);
    let cluster = Cluster::start_listed(5).await;

    let e = refusal(&cluster, &DatasetDef::text_lines(three_files), ProcessingMode::File).await;
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("3 file(s)") && msg.contains("5 workers"), "{msg}");

    let e = refusal(&cluster, &DatasetDef::range(10), ProcessingMode::File).await;
    assert!(e.to_string().contains("`range` reads no files"), "{e}");

    let e = refusal(&cluster, &DatasetDef::range(10), ProcessingMode::Hint).await;
    assert!(e.to_string().contains("SHARD_HINT") && e.to_string().contains("has none"), "{e}");

    // The same cluster still serves a static read afterwards.
    let stream = cluster
        .client()
        .distribute(&DatasetDef::range(10), opts(ProcessingMode::Data))
        .await
        .unwrap();
    let got = read_by_source(stream, as_i64).await;
    assert_eq!(got.values().map(Vec::len).sum::<usize>(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_static_mode_without_worker_addresses_is_refused_naming_the_flag() {
    let cluster = Cluster::start(1).await;
    for mode in [ProcessingMode::File, ProcessingMode::Data, ProcessingMode::FileOrData] {
        let e = refusal(&cluster, &DatasetDef::range(10), mode).await;
        assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
        assert!(e.to_string().contains("--worker-addresses"), "{mode}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamic_and_off_refuse_shard_hint_and_dynamic_refuses_zip() {
    let cluster = Cluster::start(1).await;
    let hinted = DatasetDef::range(20).shard(ShardArg::Hint, ShardArg::Hint);
    for mode in [ProcessingMode::Dynamic, ProcessingMode::Off] {
        let e = refusal(&cluster, &hinted, mode).await;
        assert_eq!(e.code(), Some(Code::FailedPrecondition), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("SHARD_HINT") && msg.contains("HINT processing mode"), "{msg}");
    }
    let zipped = DatasetDef::range(3).zip(vec![DatasetDef::range(3)]);
    let e = refusal(&cluster, &zipped, ProcessingMode::Dynamic).await;
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    assert!(e.to_string().contains("`zip`"), "{e}");
    // OFF reads a zip: each worker runs the whole pipeline.
    let stream = cluster.client().distribute(&zipped, opts(ProcessingMode::Off)).await.unwrap();
    let got = read_by_source(stream, |e| e.components.len()).await;
    assert_eq!(got.values().flatten().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_not_in_worker_addresses_exits_naming_the_list() {
    let cluster = Cluster::start_listed(1).await;
    let listed = cluster.workers[0].address().to_string();
    let (ok, _, stderr) =
        run_sluice(&["worker", "--dispatcher", &cluster.dispatcher_address, "--port", "0"], None);
    assert!(!ok, "the refused worker exits non-zero; stderr: {stderr}");
    assert!(stderr.contains("is not in the dispatcher's worker_addresses"), "{stderr}");
    assert!(stderr.contains(&listed) && stderr.contains("--worker-addresses"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_read_without_a_worker_in_the_process_is_refused() {
    let cluster = Cluster::start(1).await;
    let spec = r#"{"stages": [{"range": {"stop": 5}}]}"#;
    let addr = cluster.dispatcher_address.as_str();
    for (mode, extra) in [("off", false), ("data", true)] {
        let args = ["read", "--dispatcher", addr, "--spec", "-", "--mode", mode];
        let args = [&args[..], &["--target-workers", "local"]].concat();
        let (ok, _, stderr) = run_sluice(&args, Some(spec));
        assert!(!ok, "{stderr}");
        assert!(
            stderr.contains("target_workers=LOCAL reads only workers in this process")
                && stderr.contains("use ANY"),
            "{stderr}"
        );
        assert_eq!(stderr.contains("--worker-addresses"), extra, "{mode}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_read_reads_only_the_workers_in_this_process_and_ends_with_them() {
    let cluster = Cluster::start(2).await;
    let remote = common::server(&["worker", "--dispatcher", &cluster.dispatcher_address]);
    cluster.wait_workers(3).await;
    let mut local: Vec<String> = cluster.workers.iter().map(|w| w.address().to_string()).collect();
    local.sort();

    let read = |target| {
        let client = cluster.client();
        async move {
            let opts = opts(ProcessingMode::Off).target_workers(target);
            client.distribute(&DatasetDef::range(10), opts).await.unwrap()
        }
    };
    tracing::info!("--- LOCAL: the two in-process workers' copies only");
    let got = read_by_source(read(TargetWorkers::Local).await, as_i64).await;
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), local, "{got:?}");
    for v in got.values() {
        assert_eq!(*v, (0..10).collect::<Vec<i64>>());
    }
    tracing::info!("--- ANY: all three workers");
    let got = read_by_source(read(TargetWorkers::Any).await, as_i64).await;
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.contains_key(remote.address()), "{got:?}");
}

#[test]
fn mode_and_target_strings_parse_in_any_case_and_bad_ones_name_the_choices() {
    for (s, m) in [
        ("FILE", ProcessingMode::File),
        ("data", ProcessingMode::Data),
        ("File_Or_Data", ProcessingMode::FileOrData),
        ("hint", ProcessingMode::Hint),
    ] {
        assert_eq!(s.parse::<ProcessingMode>().unwrap(), m);
        assert_eq!(m.to_string().parse::<ProcessingMode>().unwrap(), m);
    }
    let e = "sharded".parse::<ProcessingMode>().unwrap_err().to_string();
    assert!(e.contains("file_or_data") && e.contains("hint"), "{e}");
    assert_eq!("LOCAL".parse::<TargetWorkers>().unwrap(), TargetWorkers::Local);
    assert_eq!("any".parse::<TargetWorkers>().unwrap(), TargetWorkers::Any);
    assert_eq!("auto".parse::<TargetWorkers>().unwrap(), TargetWorkers::Auto);
    let e = "near".parse::<TargetWorkers>().unwrap_err().to_string();
    assert!(e.contains("auto") && e.contains("local"), "{e}");
}

#[test]
fn the_cli_runs_data_sharding_over_dispatcher_and_worker_processes() {
    let ports = Port::reserve_n(2).unwrap();
    let listed: Vec<String> = ports.iter().map(Port::address).collect();
    let list = listed.join(",");
    let dispatcher = common::server(&["dispatcher", "--port", "0", "--worker-addresses", &list]);
    let workers: Vec<Proc> = ports
        .iter()
        .map(|p| {
            let port = p.number().to_string();
            common::server(&["worker", "--dispatcher", dispatcher.address(), "--port", &port])
        })
        .collect();
    assert_eq!(workers.len(), 2);
    let spec = r#"{"stages": [{"range": {"stop": 40}}]}"#;
    let args = ["read", "--dispatcher", dispatcher.address(), "--spec", "-", "--mode", "DATA"];
    let (ok, stdout, stderr) =
        run_sluice(&[&args[..], &["--target-workers", "any"]].concat(), Some(spec));
    assert!(ok, "{stderr}");
    let mut got: Vec<i64> = stdout.lines().map(|l| l.trim().parse().expect(l)).collect();
    got.sort();
    assert_eq!(got, (0..40).collect::<Vec<i64>>(), "each element once across the two shards");
}
