//! A node whose work_dir was wiped must not vote as if it remembered (issue 14).
//!
//! The schedule that loses data without it: a 3-node quorum on sled; follower `g` is down
//! while entry X commits on the leader `l` and follower `f`; then `l` crashes and `f` is
//! wiped and restarted, and `g` comes back. `g` lacks X; `f`, empty, would grant `g` its vote
//! (its log is "as up to date" as nothing), `g` would lead without X and overwrite it on
//! `l` when `l` returns. With the bootstrap rules (`dispatcher/src/raft/bootstrap.rs`) `f`
//! refuses every vote until the leader has caught it up as a learner and made it a voter
//! again, so no leader is elected until `l` is back, and X survives.

mod common;

use common::wait_blocking;
use sluice_client::{Client, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_testkit::{Quorum, QuorumConfig};

fn ids(status: &sluice_client::ServiceStatus) -> Vec<String> {
    status.datasets.iter().map(|d| d.dataset_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_does_not_vote_until_it_has_rejoined_as_a_learner() {
    common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().to_str().unwrap().to_string();
    let exe = common::sluice().exe().to_path_buf();
    let mut config = QuorumConfig::new(exe, 3, &work_dir);
    // The bootstrap's progress lines are what the test waits on.
    let filter = "warn,sluice_dispatcher::raft::bootstrap=info";
    config.envs = vec![("SLUICE_LOG".to_string(), filter.to_string())];
    let mut q = Quorum::start_async(config).await.unwrap();
    let client = Client::new(q.addresses(), RetryPolicy::for_tests()).unwrap();
    let before = client.register_dataset(&DatasetDef::range(10), Some("before")).await.unwrap();

    let l = q.leader().await.unwrap();
    let mut others = (1..=3).filter(|id| *id != l);
    let (f, g) = (others.next().unwrap(), others.next().unwrap());

    q.kill(g);
    // Committed by l and f only.
    let x = client.register_dataset(&DatasetDef::range(20), Some("x")).await.unwrap();
    q.kill(l);
    q.kill(f);
    std::fs::remove_dir_all(dir.path().join(format!("node-{f}"))).unwrap();
    q.start_node_async(f).await.unwrap();
    q.start_node_async(g).await.unwrap();

    // g stands for election; f must refuse it (without the gate f grants it, g leads
    // without x, and this never appears).
    let refused = || q.node(f).unwrap().stderr_tail().contains("refused a vote request");
    wait_blocking("the wiped node to refuse a vote", refused);
    assert!(
        q.node(f).unwrap().stderr_tail().contains("rejoining as a learner"),
        "{}",
        q.node(f).unwrap().stderr_tail()
    );

    // The old leader returns; f is caught up as a learner and becomes a voter again.
    q.start_node_async(l).await.unwrap();
    let status = common::leader_status(&client).await;
    assert!(ids(&status).contains(&x), "x survived: {:?}", ids(&status));
    assert!(ids(&status).contains(&before));
    let rejoined = || q.node(f).unwrap().stderr_tail().contains("rejoined as a voter");
    wait_blocking("the wiped node to rejoin as a voter", rejoined);

    // f now holds the log and votes: with l down again, f and g elect a leader that has x.
    q.kill(l);
    let status = common::leader_status(&client).await;
    assert!(ids(&status).contains(&x), "x survived l's loss: {:?}", ids(&status));
    let raft = status.raft.expect("raft status");
    assert!(raft.members.contains_key(&f), "f is a voter again: {raft:?}");
}
