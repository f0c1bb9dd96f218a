//! Three dispatcher processes in a Raft group: leader kills mid-epoch, quorum
//! loss and recovery, a wiped node rebuilt from a snapshot, and a whole-cluster
//! restart from a work_dir on a real S3-compatible server.

mod common;

use common::{collect_i64, counts, wait_until, Quorum};
use futures::StreamExt;
use sluice_client::{Client, ClientError, ProcessingMode, ReadOptions, RetryPolicy, ServiceStatus};
use sluice_dataset::{DatasetDef, FunctionRegistry};
use sluice_worker::{WorkerConfig, WorkerHandle};
use tokio::net::TcpListener;

/// Three `sluice dispatcher` processes sharing a work_dir (each in `node-<id>/`),
/// snapshotting every `snapshot_every` entries.
fn start(work_dir: &str, envs: Vec<(String, String)>, snapshot_every: u64) -> Quorum {
    common::init_tracing();
    let every = snapshot_every.to_string();
    common::sluice().quorum(3, work_dir, &["--snapshot-every", &every], &envs)
}

fn quorum_client(q: &Quorum, retry: RetryPolicy) -> Client {
    Client::new(q.addresses(), retry).unwrap()
}

/// Waits until some node reports itself leader; returns its id.
async fn wait_leader(q: &Quorum) -> u64 {
    q.leader().await.unwrap()
}

/// This node's own view, asked of it alone.
async fn node_status(q: &Quorum, id: u64) -> Option<ServiceStatus> {
    let c = Client::new(&[q.address(id).to_string()], RetryPolicy::for_tests()).unwrap();
    c.status_of_each().await.pop().and_then(|(_, r)| r.ok())
}

async fn workers(q: &Quorum, n: usize) -> Vec<WorkerHandle> {
    let mut out = vec![];
    for _ in 0..n {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = WorkerConfig::for_tests(q.addresses().to_vec());
        out.push(
            sluice_worker::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap(),
        );
    }
    let client = quorum_client(q, RetryPolicy::for_tests());
    wait_until(&format!("{n} workers registered"), || {
        let c = client.clone();
        async move { c.status().await.map(|s| s.from_leader && s.workers.len() == n).unwrap_or(false) }
    })
    .await;
    out
}

fn dynamic(job: &str) -> ReadOptions {
    ReadOptions::new(ProcessingMode::Dynamic).job_name(job).worker_retry(RetryPolicy::for_tests())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_mid_epoch_loses_no_split_and_the_dead_node_catches_up() {
    const N: i64 = 600;
    let dir = tempfile::tempdir().unwrap();
    let mut q = start(dir.path().to_str().unwrap(), vec![], 100);
    let leader = wait_leader(&q).await;
    let ws = workers(&q, 2).await;
    let client = quorum_client(&q, RetryPolicy::for_tests());
    let id = client.register_dataset(&DatasetDef::range(N), None).await.unwrap();
    let mut stream = client.from_dataset_id(&id, dynamic("epoch")).await.unwrap();
    let mut got = vec![];
    for _ in 0..N / 3 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }

    tracing::info!("--- SIGKILL the leader (node {leader}) mid-epoch");
    q.kill(leader);
    got.extend(collect_i64(stream).await);
    let c = counts(&got);
    assert_eq!(c.len() as i64, N, "no split lost");
    assert!(c.values().all(|n| *n == 1), "no split doubled: {c:?}");
    let new_leader = wait_leader(&q).await;
    assert_ne!(new_leader, leader);

    tracing::info!("--- restart node {leader}: it catches up");
    q.start_node(leader).unwrap();
    let target = node_status(&q, new_leader).await.unwrap().raft.unwrap().applied_index;
    wait_until("the restarted node to catch up", || async {
        let applied =
            node_status(&q, leader).await.and_then(|s| s.raft).and_then(|r| r.applied_index);
        applied >= target
    })
    .await;
    for w in ws {
        w.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_down_stops_progress_with_a_clear_error_and_one_back_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut q = start(dir.path().to_str().unwrap(), vec![], 100);
    let leader = wait_leader(&q).await;
    let client = quorum_client(&q, RetryPolicy::for_tests());
    let first = client.register_dataset(&DatasetDef::range(3), Some("before")).await.unwrap();
    let all = q.addresses().join(",");
    let mut out = String::new();
    // The third node may still be settling into its role: wait for it.
    common::wait_blocking("`sluice status` to show one leader and two followers", || {
        let (ok, o, _) = common::run_sluice(&["status", "--dispatcher", &all], None);
        out = o;
        ok && out.matches(" leader ").count() == 1 && out.matches(" follower ").count() == 2
    });
    assert!(out.contains("DATASETS (1)") && out.contains("before"), "{out}");
    assert!(out.contains("TERM") && out.contains("APPLIED") && out.contains("SNAPSHOT"), "{out}");

    let down: Vec<u64> = (1..=3).filter(|i| *i != leader).take(1).chain([leader]).collect();
    tracing::info!("--- kill nodes {down:?}: no quorum");
    for id in &down {
        q.kill(*id);
    }
    let short = quorum_client(
        &q,
        RetryPolicy::for_tests().with_deadline(std::time::Duration::from_secs(2)),
    );
    let err = short.register_dataset(&DatasetDef::range(4), Some("during")).await.unwrap_err();
    assert!(matches!(err, ClientError::Unavailable { .. }), "{err}");

    tracing::info!("--- restore node {}: progress resumes", down[0]);
    q.start_node(down[0]).unwrap();
    let again = client.register_dataset(&DatasetDef::range(4), Some("after")).await.unwrap();
    assert_eq!(again, "after");
    let status = common::leader_status(&client).await;
    let ids: Vec<&str> = status.datasets.iter().map(|d| d.dataset_id.as_str()).collect();
    assert!(ids.contains(&first.as_str()) && ids.contains(&"after"), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_is_rebuilt_from_the_leaders_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut q = start(dir.path().to_str().unwrap(), vec![], 20);
    let leader = wait_leader(&q).await;
    let client = quorum_client(&q, RetryPolicy::for_tests());
    for i in 0..80 {
        client.register_dataset(&DatasetDef::range(i + 1), Some(&format!("d{i}"))).await.unwrap();
    }
    let follower = (1..=3).find(|i| *i != leader).unwrap();
    tracing::info!("--- wipe follower {follower}'s work_dir and restart it");
    q.kill(follower);
    std::fs::remove_dir_all(dir.path().join(format!("node-{follower}"))).unwrap();
    q.start_node(follower).unwrap();
    let target = node_status(&q, leader).await.unwrap().raft.unwrap().applied_index;
    wait_until("the wiped node to be rebuilt", || async {
        match node_status(&q, follower).await {
            Some(s) => {
                let raft = s.raft.unwrap();
                raft.applied_index >= target && s.datasets.len() == 80
            }
            None => false,
        }
    })
    .await;
    let raft = node_status(&q, follower).await.unwrap().raft.unwrap();
    assert!(raft.snapshot_index.is_some(), "rebuilt from a snapshot: {raft:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_cluster_restarts_from_a_work_dir_on_s3_with_all_state() {
    const N: i64 = 50;
    let s3 = sluice_journal::testing::MotoServer::start();
    let work_dir = format!("s3://{}/cluster", s3.bucket());
    let mut q = start(&work_dir, s3.env(), 30);
    wait_leader(&q).await;
    let ws = workers(&q, 2).await;
    let client = quorum_client(&q, RetryPolicy::for_tests());
    let id = client.register_dataset(&DatasetDef::range(N), Some("kept")).await.unwrap();
    let mut got = collect_i64(client.from_dataset_id(&id, dynamic("whole")).await.unwrap()).await;
    got.sort();
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    let before = common::leader_status(&client).await;

    tracing::info!("--- stop every node, then start them all again");
    for id in 1..=3 {
        q.kill(id);
    }
    for id in 1..=3 {
        q.start_node(id).unwrap();
    }
    wait_leader(&q).await;
    let after = common::leader_status(&client).await;
    assert_eq!(after.datasets, before.datasets);
    // Client counts may change as readers release; everything else must match.
    let durable = |s: &ServiceStatus| {
        let mut jobs = s.jobs.clone();
        jobs.iter_mut().flat_map(|j| j.iterations.iter_mut()).for_each(|it| it.clients = 0);
        jobs
    };
    assert_eq!(durable(&after), durable(&before), "jobs, iterations and cursors as before");
    assert!(after.jobs[0].iterations[0].finished);
    for w in ws {
        w.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_keep_reading_from_workers_while_no_leader_exists() {
    const N: i64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let mut q = start(dir.path().to_str().unwrap(), vec![], 100);
    let leader = wait_leader(&q).await;
    let ws = workers(&q, 2).await;
    let client = quorum_client(&q, RetryPolicy::for_tests());
    let opts = ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests());
    let mut stream = client.distribute(&DatasetDef::range(N), opts).await.unwrap();
    let mut got = vec![];
    for _ in 0..100 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }

    let down: Vec<u64> = (1..=3).filter(|i| *i != leader).take(1).chain([leader]).collect();
    tracing::info!("--- kill nodes {down:?}: no leader; workers keep streaming");
    for id in &down {
        q.kill(*id);
    }
    // More than every buffer on the way holds (2 × 256 per task, 16 messages of
    // up to 64 in the client, a few in flight): produced while no leader exists.
    for _ in 0..2500 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    let status = node_status(&q, (1..=3).find(|i| !down.contains(i)).unwrap()).await.unwrap();
    assert!(!status.from_leader, "no leader while elements still arrived: {:?}", status.raft);

    tracing::info!("--- restore node {}: the read finishes", down[0]);
    q.start_node(down[0]).unwrap();
    got.extend(collect_i64(stream).await);
    let c = counts(&got);
    assert_eq!(c.len() as i64, N);
    assert!(c.values().all(|n| *n == 2), "each element once per worker");
    for w in ws {
        w.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_told_the_leader_is_down_names_the_next_live_leader_instead() {
    // Issue 33: for a lease after the leader died, its followers named it, so a
    // client whose connection there was refused went back to it or backed off
    // before it found the new leader. A client now says which addresses it
    // found down, and a follower holds its refusal until it can name a live
    // leader (or knows none).
    let dir = tempfile::tempdir().unwrap();
    let mut q = start(dir.path().to_str().unwrap(), vec![], 1000);
    let leader = wait_leader(&q).await;
    let dead = q.address(leader).to_string();
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let mut grpc = sluice_proto::v1::dispatcher_client::DispatcherClient::connect(format!(
        "http://{}",
        q.address(follower)
    ))
    .await
    .unwrap();
    let write = |down: &str| {
        let mut req = tonic::Request::new(sluice_proto::v1::RegisterDatasetRequest {
            dataset: Some((&DatasetDef::range(3)).into()),
            dataset_id: String::new(),
        });
        if !down.is_empty() {
            let value = down.parse().unwrap();
            req.metadata_mut().insert(sluice_proto::contract::LEADER_DOWN_METADATA, value);
        }
        req
    };
    tracing::info!("--- a live leader reported down is still named: it is heard");
    let refused = grpc.register_dataset(write(&dead)).await.unwrap_err();
    let named = sluice_proto::contract::leader_address(&refused);
    assert_eq!(named, Some(dead.as_str()), "{refused:?}");

    tracing::info!(leader, "--- SIGKILL the leader; the follower is told at once");
    q.kill(leader);
    let refused = grpc.register_dataset(write(&dead)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    let named = sluice_proto::contract::leader_address(&refused);
    assert_ne!(named, Some(dead.as_str()), "named the dead leader: {refused:?}");
    // Once one is elected, it is the one named (unless this follower leads).
    let new = wait_leader(&q).await;
    if let Err(refused) = grpc.register_dataset(write(&dead)).await {
        let named = sluice_proto::contract::leader_address(&refused);
        assert_eq!(named, Some(q.address(new)), "{refused:?}");
    }
}
