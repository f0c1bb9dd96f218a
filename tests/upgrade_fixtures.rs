//! Upgrades never lose state (issue 16, item 5): work_dirs written by earlier
//! builds are committed under `tests/fixtures/workdir/<version>/{local,object}`,
//! and this build must open each of them (as a copy) with a real `sluice
//! dispatcher` process and carry on where the old build stopped: the same
//! datasets, jobs and split cursors, a replayed split request answered as
//! before, and the next split after the recorded ones (none handed out twice).
//! A work_dir "written by a newer build" (version bytes bumped) is refused with
//! a message that says what to do, and left unchanged byte for byte.
//!
//! The fixtures are made by `regenerate_fixtures` below, which only writes when
//! `SLUICE_REGENERATE_FIXTURES=<version dir>` is set (see the README next to
//! them: a version directory is never regenerated in place).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use sluice_client::{DispatcherClient, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;

#[path = "upgrade_fixtures/fixture_files.rs"]
mod fixture_files;
use fixture_files::{copy_dir, snapshot_dir, Layout};

/// The flags every run over a fixture uses: a small snapshot interval (so the
/// fixture holds a snapshot and log entries after it) and no liveness timeouts
/// (a worker or iteration recorded in the fixture is not ended by the clock
/// while a test looks at it).
fn dispatcher_args(work_dir: &str) -> Vec<String> {
    [
        "dispatcher",
        "--port",
        "0",
        "--work-dir",
        work_dir,
        "--snapshot-every",
        "5",
        "--worker-timeout-secs",
        "0",
        "--client-timeout-secs",
        "0",
        "--job-gc-timeout-secs",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start_dispatcher(work_dir: &str) -> common::Proc {
    start_dispatcher_env(work_dir, &[])
}

fn start_dispatcher_env(work_dir: &str, envs: &[(String, String)]) -> common::Proc {
    let args = dispatcher_args(work_dir);
    common::server_env(&args.iter().map(String::as_str).collect::<Vec<_>>(), envs)
}

/// The fake worker the fixture records (it never serves: the tests play it).
const WORKER_UID: u64 = 9;
const WORKER_ADDRESS: &str = "127.0.0.1:1";

fn get_split(task_id: u64, sequence: u64) -> pb::GetSplitRequest {
    pb::GetSplitRequest {
        task_id,
        worker_uid: WORKER_UID,
        sequence,
        split_provider_index: 0,
        repetition: 0,
        max_splits: 1,
    }
}

/// What the fixture's README promises about its state, recomputed from a
/// status answer (soft fields such as heartbeat ages left out).
fn summary(s: &sluice_client::ServiceStatus) -> Value {
    let mut datasets: Vec<_> =
        s.datasets.iter().map(|d| json!([d.dataset_id, d.source_cardinality])).collect();
    datasets.sort_by_key(|d| d.to_string());
    let mut jobs: Vec<_> = s
        .jobs
        .iter()
        .map(|j| {
            let its: Vec<_> = j
                .iterations
                .iter()
                .map(|i| {
                    json!({"iteration_id": i.iteration_id, "tasks": i.tasks,
                    "split_cursor": i.split_cursor, "finished": i.finished})
                })
                .collect();
            json!({"job_id": j.job_id, "job_name": j.job_name, "dataset_id": j.dataset_id,
                "mode": j.mode.map(|m| m.to_string()), "iterations": its})
        })
        .collect();
    jobs.sort_by_key(|j| j["job_id"].as_u64());
    let workers: Vec<_> = s.workers.iter().map(|w| json!([w.address, w.worker_uid])).collect();
    json!({"datasets": datasets, "jobs": jobs, "workers": workers})
}

/// Writes `tests/fixtures/workdir/$SLUICE_REGENERATE_FIXTURES/{local,object}`
/// with this build. Without the variable it checks only that the generator's
/// recipe runs (into a temp dir), so the recipe cannot rot unnoticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerate_fixtures() {
    common::init_tracing();
    let target = std::env::var("SLUICE_REGENERATE_FIXTURES").ok();
    let scratch = tempfile::tempdir().unwrap();
    for layout in [Layout::Local, Layout::Object] {
        let out = match &target {
            Some(v) => fixture_files::root().join(v).join(layout.name()),
            None => scratch.path().join(layout.name()),
        };
        assert!(!out.exists(), "{} exists: never regenerate a fixture in place", out.display());
        std::fs::create_dir_all(&out).unwrap();
        let expected = generate(&layout.work_dir(&out.join("work_dir"))).await;
        let text = serde_json::to_string_pretty(&expected).unwrap() + "\n";
        std::fs::write(out.join("expected.json"), text).unwrap();
        let size: u64 = snapshot_dir(&out).values().map(|b| b.len() as u64).sum();
        tracing::info!(layout = layout.name(), size, "fixture written");
        assert!(size < 2 << 20, "{}: {size} bytes, keep fixtures under 2 MiB", out.display());
    }
}

/// Runs a dispatcher on `work_dir` through a recipe that leaves a snapshot and
/// log entries after it; returns what a later build must find there.
async fn generate(work_dir: &str) -> Value {
    let mut proc = start_dispatcher(work_dir);
    let address = proc.address().to_string();
    let d =
        DispatcherClient::new(std::slice::from_ref(&address), RetryPolicy::for_tests()).unwrap();
    let client =
        sluice_client::Client::new(std::slice::from_ref(&address), RetryPolicy::for_tests())
            .unwrap();
    tracing::info!("--- a worker, three datasets, two jobs with an iteration each");
    d.register_worker(pb::RegisterWorkerRequest {
        address: WORKER_ADDRESS.into(),
        worker_uid: WORKER_UID,
        functions: vec![],
        python_version: String::new(),
    })
    .await
    .unwrap();
    let range7 = client.register_dataset(&DatasetDef::range(7), Some("range7")).await.unwrap();
    let range5 = client.register_dataset(&DatasetDef::range(5), None).await.unwrap();
    client.register_dataset(&DatasetDef::range(3).batch(2, false), Some("batched")).await.unwrap();
    let mut task_of_job = BTreeMap::new();
    for (dataset_id, name, mode) in [
        (&range7, "train", pb::ProcessingMode::Dynamic),
        (&range5, "eval", pb::ProcessingMode::Off),
    ] {
        let job = d
            .get_or_create_job(pb::GetOrCreateJobRequest {
                dataset_id: dataset_id.clone(),
                mode: mode as i32,
                job_name: name.into(),
                target_workers: 0,
                use_cross_trainer_cache: false,
                num_consumers: None,
                ..Default::default()
            })
            .await
            .unwrap();
        d.get_or_create_iteration(pb::GetOrCreateIterationRequest {
            job_id: job.job_id,
            repetition: 0,
            ..Default::default()
        })
        .await
        .unwrap();
        task_of_job.insert(name, job.job_id);
    }
    let hb = pb::WorkerHeartbeatRequest {
        address: WORKER_ADDRESS.into(),
        worker_uid: WORKER_UID,
        ..Default::default()
    };
    let tasks = d.worker_heartbeat(hb).await.unwrap().new_tasks;
    let train = task_of_job["train"];
    let task = tasks.iter().find(|t| t.job_id == train).expect("a task of the train job");
    tracing::info!("--- three splits granted to the train job's task");
    let mut granted = vec![];
    for seq in 0..3 {
        let split = d.get_split(get_split(task.task_id, seq)).await.unwrap().split.unwrap();
        granted.push(json!([split.begin, split.end]));
    }
    let status = common::leader_status(&client).await;
    let raft = status.raft.clone().unwrap();
    let (snapshot, last) = (raft.snapshot_index.unwrap_or(0), raft.last_log_index.unwrap());
    assert!(snapshot > 0 && last > snapshot, "want a snapshot and entries after it: {raft:?}");
    tracing::info!("--- stop it (SIGTERM) and wait for it to exit");
    kill(Pid::from_raw(proc.id() as i32), Signal::SIGTERM).unwrap();
    common::wait_blocking("the dispatcher to exit", || proc.exited());
    json!({
        "state": summary(&status),
        "train_task_id": task.task_id,
        "granted": granted,
        "snapshot_index": snapshot,
        "last_log_index": last,
    })
}

/// Every committed fixture version directory.
fn versions() -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(fixture_files::root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no fixtures under {}", fixture_files::root().display());
    v
}

async fn opens_and_continues(version: &Path, layout: Layout) {
    let fixture = version.join(layout.name());
    let copy = tempfile::tempdir().unwrap();
    copy_dir(&fixture.join("work_dir"), &copy.path().join("work_dir"));
    let work_dir = layout.work_dir(&copy.path().join("work_dir"));
    continues(&fixture, &work_dir, &[]).await;
}

/// Starts this build on `work_dir` (a copy of `fixture`'s, reached with `envs`)
/// and checks that it holds the state `fixture/expected.json` records and
/// continues from it.
async fn continues(fixture: &Path, work_dir: &str, envs: &[(String, String)]) {
    let what = format!("{} at {work_dir}", fixture.display());
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("expected.json")).unwrap())
            .unwrap();
    tracing::info!(%what, "--- start this build on a copy of the fixture");
    let proc = start_dispatcher_env(work_dir, envs);
    let address = proc.address().to_string();
    let client =
        sluice_client::Client::new(std::slice::from_ref(&address), RetryPolicy::for_tests())
            .unwrap();
    let status = common::leader_status(&client).await;
    assert_eq!(summary(&status), expected["state"], "{what}: the state as recorded");
    let raft = status.raft.unwrap();
    assert!(
        raft.applied_index >= expected["last_log_index"].as_u64(),
        "{what}: the log after the snapshot was replayed: {raft:?}"
    );

    tracing::info!("--- the recorded grants stand, and the next split follows them");
    let d =
        DispatcherClient::new(std::slice::from_ref(&address), RetryPolicy::for_tests()).unwrap();
    let task = expected["train_task_id"].as_u64().unwrap();
    let granted = expected["granted"].as_array().unwrap();
    // The dispatcher keeps the last answer per task for replay (a worker that
    // lost the reply asks again with the same sequence).
    let last_seq = granted.len() as u64 - 1;
    let again = d.get_split(get_split(task, last_seq)).await.unwrap().split.unwrap();
    assert_eq!(json!([again.begin, again.end]), granted[last_seq as usize], "{what}: replay");
    let last_end = granted.last().unwrap()[1].as_u64().unwrap();
    let next = d.get_split(get_split(task, granted.len() as u64)).await.unwrap();
    let next = next.split.expect("splits left in range(7)");
    assert_eq!(next.begin, last_end, "{what}: the next split continues after the recorded ones");

    tracing::info!("--- `sluice status` shows it");
    let (ok, out, err) = common::run_sluice(&["status", "--dispatcher", &address], None);
    assert!(ok, "{what}: sluice status failed: {err}");
    for id in ["range7", "batched", "train", "eval"] {
        assert!(out.contains(id), "{what}: `{id}` missing from sluice status:\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_local_fixture_opens_and_continues() {
    common::init_tracing();
    for version in versions() {
        opens_and_continues(&version, Layout::Local).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_object_store_fixture_opens_and_continues() {
    common::init_tracing();
    for version in versions() {
        opens_and_continues(&version, Layout::Object).await;
    }
}

/// The object-store fixtures uploaded to an S3 server (moto) and read through
/// `s3://`: the same objects, so the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_committed_object_store_fixture_opens_from_s3_and_continues() {
    use object_store::{ObjectStoreExt, PutPayload};
    common::init_tracing();
    let s3 = sluice_journal::testing::MotoServer::start();
    for (n, version) in versions().iter().enumerate() {
        let fixture = version.join(Layout::Object.name());
        let work_dir = format!("s3://{}/fixture-{n}", s3.bucket());
        tracing::info!(%work_dir, "--- upload {}", fixture.display());
        let (store, root) =
            sluice_journal::testing::object_store_for(&work_dir, &s3.options()).unwrap();
        for (name, bytes) in snapshot_dir(&fixture.join("work_dir")) {
            if name.ends_with('/') {
                continue;
            }
            let path = name.split('/').fold(root.clone(), |p, part| p.join(part));
            store.put(&path, PutPayload::from(bytes)).await.unwrap();
        }
        continues(&fixture, &work_dir, &s3.env()).await;
    }
}

/// A copy of the newest fixture whose last log entry is rewritten as a later
/// build would write it (format version bumped): a real dispatcher refuses to
/// start, says what to do, and changes nothing in the work_dir.
async fn a_newer_work_dir_is_refused_unchanged(layout: Layout) {
    let newest = versions().pop().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let work_dir = copy.path().join("work_dir");
    copy_dir(&newest.join(layout.name()).join("work_dir"), &work_dir);
    let work_dir = layout.work_dir(&work_dir);
    let journal = format!("{work_dir}/node-1");
    tracing::info!(%journal, "--- rewrite the last entry in a newer format");
    let newer = fixture_files::CURRENT_FORMAT + 1;
    {
        let (j, _) = sluice_journal::open(&journal).await.unwrap();
        let last = j.state().await.unwrap().last_index.expect("entries after the snapshot");
        let (_, bytes) = j.read(last, last + 1).await.unwrap().pop().unwrap();
        j.truncate(last).await.unwrap();
        let bumped = fixture_files::with_format(&bytes, newer);
        j.append(vec![(last, bumped.into())]).await.unwrap();
    }
    assert!(sluice_journal::wait_closed(&journal, Duration::from_secs(10)).await);
    let before = snapshot_dir(copy.path());

    tracing::info!("--- this build refuses it, and says what to do");
    let args = dispatcher_args(&work_dir);
    let (ok, _, err) =
        common::run_sluice(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    assert!(!ok, "a dispatcher started on a newer work_dir");
    let want = format!(
        "was written by a newer Sluice (format {newer}, this build reads up to {}): upgrade \
         this binary or restore a backup; nothing was changed",
        fixture_files::CURRENT_FORMAT
    );
    assert!(err.contains(&want), "{}: stderr lacks `{want}`:\n{err}", layout.name());
    assert!(err.contains(&journal.replace("file://", "")), "names the work_dir:\n{err}");
    let after = snapshot_dir(copy.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the refused start added or removed files"
    );
    for (name, bytes) in &before {
        assert!(after[name] == *bytes, "the refused start changed {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_work_dir_from_a_newer_build_is_refused_unchanged() {
    common::init_tracing();
    a_newer_work_dir_is_refused_unchanged(Layout::Local).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_store_work_dir_from_a_newer_build_is_refused_unchanged() {
    common::init_tracing();
    a_newer_work_dir_is_refused_unchanged(Layout::Object).await;
}
