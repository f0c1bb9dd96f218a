//! A node whose work_dir was wiped must not vote as if it remembered (issue 14);
//! a node sent a forged snapshot or vote must keep serving and start again
//! (issue 31, below).
//!
//! The schedule that loses data without it: a 3-node quorum on sled; follower `g` is down
//! while entry X commits on the leader `l` and follower `f`; then `l` crashes and `f` is
//! wiped and restarted, and `g` comes back. `g` lacks X; `f`, empty, would grant `g` its vote
//! (its log is "as up to date" as nothing), `g` would lead without X and overwrite it on
//! `l` when `l` returns. With the bootstrap rules (`dispatcher/src/raft/bootstrap.rs`) `f`
//! refuses every vote until the leader has caught it up as a learner and made it a voter
//! again, so no leader is elected until `l` is back, and X survives.

mod common;

use std::time::Duration;

use common::wait_blocking;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{CommittedLeaderId, LogId, SnapshotMeta, Vote};
use sluice_client::{Client, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_dispatcher::raft::codec::encode;
use sluice_dispatcher::raft::state_machine::Applied;
use sluice_dispatcher::raft::TypeConfig;
use sluice_proto::v1 as pb;
use sluice_testkit::{wait_until, Quorum, QuorumConfig};
use tonic::Code;

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

/// A term far beyond the group's, and an index far beyond its log (the issue's).
const FORGED_TERM: u64 = 1_000_000;
const FORGED_INDEX: u64 = 1_000_000_000;

async fn three_nodes(dir: &tempfile::TempDir) -> Quorum {
    let work_dir = dir.path().to_str().unwrap().to_string();
    let exe = common::sluice().exe().to_path_buf();
    Quorum::start_async(QuorumConfig::new(exe, 3, &work_dir)).await.unwrap()
}

/// Which Raft RPC `raft_rpc` sends.
#[derive(Clone, Copy, Debug)]
enum Rpc {
    Vote,
    AppendEntries,
    InstallSnapshot,
}

/// One Raft RPC to `address` as anyone who reaches the port may send it (the
/// group has no peer secret, as in the README's walkthrough).
async fn raft_rpc(
    address: &str,
    rpc: Rpc,
    data: Vec<u8>,
) -> Result<pb::RaftMessage, tonic::Status> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}")).unwrap();
    let mut client = pb::raft_peer_client::RaftPeerClient::new(
        endpoint.connect_timeout(Duration::from_secs(5)).connect_lazy(),
    );
    let msg = pb::RaftMessage { data: data.into() };
    let call = async {
        match rpc {
            Rpc::Vote => client.vote(msg).await,
            Rpc::AppendEntries => client.append_entries(msg).await,
            Rpc::InstallSnapshot => client.install_snapshot(msg).await,
        }
    };
    Ok(tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no answer"))??
        .into_inner())
}

/// A one-chunk InstallSnapshot from "leader" `from` in a forged term, its meta
/// at index 10^9, with `body`.
fn forged_snapshot(from: u64, body: Vec<u8>) -> Vec<u8> {
    let last = LogId::new(CommittedLeaderId::new(FORGED_TERM, from), FORGED_INDEX);
    let req: InstallSnapshotRequest<TypeConfig> = InstallSnapshotRequest {
        vote: Vote::new_committed(FORGED_TERM, from),
        meta: SnapshotMeta {
            last_log_id: Some(last),
            snapshot_id: "forged".into(),
            ..Default::default()
        },
        offset: 0,
        data: body,
        done: true,
    };
    encode(&req).unwrap()
}

/// Node `id`'s applied index, as it answers for itself.
async fn applied_on(q: &Quorum, id: u64) -> Option<u64> {
    let node = Client::new(&[q.address(id).to_string()], RetryPolicy::for_tests()).ok()?;
    node.status().await.ok()?.raft?.applied_index
}

/// Writes through the group, then restarts each node in turn on its work_dir
/// and waits until it has applied that write again.
async fn every_node_restarts_and_catches_up(q: &mut Quorum, client: &Client) {
    client.register_dataset(&DatasetDef::range(20), Some("after")).await.unwrap();
    let status = common::leader_status(client).await;
    let index = status.raft.and_then(|r| r.applied_index).expect("the leader's applied index");
    for id in 1..=3 {
        tracing::info!("--- node {id} restarts on its work_dir and catches up");
        q.kill(id);
        q.start_node_async(id).await.unwrap();
        let q = &*q;
        wait_until(&format!("node {id} to apply index {index} again"), || async move {
            applied_on(q, id).await.is_some_and(|a| a >= index)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_inconsistent_snapshot_is_refused_and_every_node_restarts() {
    common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let mut q = three_nodes(&dir).await;
    let client = Client::new(q.addresses(), RetryPolicy::for_tests()).unwrap();
    client.register_dataset(&DatasetDef::range(10), Some("before")).await.unwrap();

    tracing::info!("--- to every node: a garbage body, and a body that stands elsewhere");
    // A well-formed state at no index at all, under a meta at 10^9.
    let elsewhere = encode(&Applied::default()).unwrap();
    for id in 1..=3u64 {
        let raft = q.raft_addresses()[id as usize - 1].clone();
        let from = id % 3 + 1;
        for (what, body, says) in [
            ("garbage", vec![0xa5; 200], "does not decode"),
            ("inconsistent", elsewhere.clone(), "last applied log id"),
        ] {
            let status = raft_rpc(&raft, Rpc::InstallSnapshot, forged_snapshot(from, body))
                .await
                .expect_err("a forged snapshot must be refused");
            assert_eq!(status.code(), Code::InvalidArgument, "{what} to node {id}: {status:?}");
            assert!(status.message().contains(says), "{what} to node {id}: {status:?}");
        }
    }

    tracing::info!("--- the group keeps a leader and commits; every node starts again");
    every_node_restarts_and_catches_up(&mut q, &client).await;
    let status = common::leader_status(&client).await;
    assert_eq!(status.datasets.len(), 2, "{:?}", ids(&status));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_vote_naming_the_receiver_as_leader_is_refused() {
    common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let mut q = three_nodes(&dir).await;
    let client = Client::new(q.addresses(), RetryPolicy::for_tests()).unwrap();
    client.register_dataset(&DatasetDef::range(10), Some("before")).await.unwrap();

    tracing::info!("--- to every node: votes naming it, as a vote request and as a leader's");
    let last = |id| Some(LogId::new(CommittedLeaderId::new(FORGED_TERM - 1, id), FORGED_INDEX));
    for id in 1..=3u64 {
        let raft = q.raft_addresses()[id as usize - 1].clone();
        let forged = [
            (
                Rpc::Vote,
                encode(&VoteRequest { vote: Vote::new(FORGED_TERM, id), last_log_id: last(id) }),
            ),
            (
                Rpc::Vote,
                encode(&VoteRequest {
                    vote: Vote::new_committed(FORGED_TERM, id),
                    last_log_id: last(id),
                }),
            ),
            (
                Rpc::AppendEntries,
                encode(&AppendEntriesRequest::<TypeConfig> {
                    vote: Vote::new_committed(FORGED_TERM, id),
                    prev_log_id: None,
                    leader_commit: None,
                    entries: vec![],
                }),
            ),
        ];
        for (rpc, data) in forged {
            let status = raft_rpc(&raft, rpc, data.unwrap())
                .await
                .expect_err("a vote naming the receiver must be refused");
            assert_eq!(status.code(), Code::InvalidArgument, "{rpc:?} to node {id}: {status:?}");
            assert!(status.message().contains("names this node"), "{rpc:?} to {id}: {status:?}");
        }
    }

    tracing::info!("--- the group keeps a leader and commits; every node starts again");
    every_node_restarts_and_catches_up(&mut q, &client).await;
}
