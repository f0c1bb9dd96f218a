//! One dispatcher node with a work_dir (local disk, and a real S3-compatible
//! server) SIGKILLed mid-epoch and restarted: datasets, jobs and the split cursor
//! survive, and the epoch completes with every element exactly once.

mod common;

use common::{collect_i64, counts, wait_until, Port};
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, FunctionRegistry};
use sluice_worker::WorkerConfig;
use tokio::net::TcpListener;

const N: i64 = 400;

async fn kill_and_restart_mid_epoch(work_dir: &str, envs: &[(String, String)]) {
    common::init_tracing();
    let port = Port::reserve().unwrap();
    let (address, number) = (port.address(), port.number().to_string());
    let args = ["dispatcher", "--port", &number, "--work-dir", work_dir, "--snapshot-every", "50"];
    let mut dispatcher = common::server_env(&args, envs);
    let mut workers = vec![];
    for _ in 0..2 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        // One split per grant: ~400 GetSplit entries, so snapshots (every 50)
        // are taken and the restart recovers from one plus the log after it.
        let config = WorkerConfig {
            splits_per_request: 1,
            ..WorkerConfig::for_tests(vec![address.clone()])
        };
        workers.push(
            sluice_worker::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap(),
        );
    }
    let client = Client::new(std::slice::from_ref(&address), RetryPolicy::for_tests()).unwrap();
    wait_until("two workers registered", || {
        let c = client.clone();
        async move { c.status().await.map(|s| s.workers.len() == 2).unwrap_or(false) }
    })
    .await;
    let id = client.register_dataset(&DatasetDef::range(N), Some("train-data")).await.unwrap();
    let other = client.register_dataset(&DatasetDef::range(7).map("square"), None).await.unwrap();
    let opts = ReadOptions::new(ProcessingMode::Dynamic)
        .job_name("epoch")
        .worker_retry(RetryPolicy::for_tests());
    let mut stream = client.from_dataset_id(&id, opts).await.unwrap();
    let mut got = vec![];
    for _ in 0..N / 2 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    let before = common::leader_status(&client).await;

    tracing::info!("--- SIGKILL the dispatcher mid-epoch and restart it on the same work_dir");
    dispatcher.kill();
    let _dispatcher = common::server_env(&args, envs);

    got.extend(collect_i64(stream).await);
    let c = counts(&got);
    assert_eq!(c.len() as i64, N, "no element lost");
    assert!(c.values().all(|n| *n == 1), "no element twice: {c:?}");

    let after = common::leader_status(&client).await;
    let ids = |s: &sluice_client::ServiceStatus| -> Vec<String> {
        s.datasets.iter().map(|d| d.dataset_id.clone()).collect()
    };
    assert_eq!(ids(&after), ids(&before), "datasets survive");
    assert!(ids(&after).contains(&other));
    let job = after.jobs.iter().find(|j| j.job_name == "epoch").expect("the job survives");
    let it = &job.iterations[0];
    assert!(it.finished, "{it:?}");
    assert_eq!(it.split_cursor, Some(0), "cursor closed the epoch: {it:?}");
    assert_eq!(it.split_repetition, Some(1), "{it:?}");
    let raft = after.raft.expect("raft status");
    assert!(raft.snapshot_index.is_some(), "snapshots were taken: {raft:?}");
    for w in workers {
        w.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_on_local_disk_survives_sigkill_mid_epoch_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    kill_and_restart_mid_epoch(dir.path().to_str().unwrap(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_on_s3_survives_sigkill_mid_epoch_exactly_once() {
    let s3 = sluice_journal::testing::MotoServer::start();
    let work_dir = format!("s3://{}/one-node", s3.bucket());
    kill_and_restart_mid_epoch(&work_dir, &s3.env()).await;
}

#[test]
fn a_corrupted_journal_refuses_to_start_naming_the_object_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let work_dir = format!("file://{}", dir.path().display());
    let port = Port::reserve().unwrap();
    let number = port.number().to_string();
    let args = ["dispatcher", "--port", &number, "--work-dir", &work_dir];
    let mut dispatcher = common::server(&args);
    let address = port.address();
    for i in 0..5 {
        let spec = format!(r#"{{"stages": [{{"range": {{"stop": {}}}}}]}}"#, i + 1);
        let (ok, _, err) =
            common::run_sluice(&["register", "--dispatcher", &address, "-"], Some(&spec));
        assert!(ok, "{err}");
    }
    dispatcher.kill();

    tracing::info!("--- flip a byte inside an early log segment");
    let log = dir.path().join("node-1").join("log");
    let mut segments: Vec<_> =
        std::fs::read_dir(&log).unwrap().map(|e| e.unwrap().path()).collect();
    segments.sort();
    assert!(segments.len() >= 4, "expected several segments, got {segments:?}");
    let victim = &segments[1];
    let mut bytes = std::fs::read(victim).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0xff;
    std::fs::write(victim, &bytes).unwrap();

    let (ok, out, err) = common::run_sluice(&args, None);
    assert!(!ok, "started on a corrupt journal: {out}");
    let name = victim.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.contains(&name) && err.contains("offset"), "names the object and offset: {err}");
}
