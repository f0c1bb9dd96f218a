//! The end of an epoch reaches the reader through a `ClientHeartbeat` long poll
//! the dispatcher answers when the iteration finishes, not at the reader's next
//! poll; an unchanged view is answered at the end of the wait; a follower refuses
//! at once. Deadlines only: the waits are made far longer than the deadlines, so
//! only the wake-up on a change can pass them.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{patient_config, Cluster, DEADLINE, LONG};
use futures::StreamExt;
use sluice_client::{DispatcherClient, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, FunctionRegistry};
use sluice_dispatcher::DispatcherConfig;
use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_client::DispatcherClient as Grpc;
use tokio::net::TcpListener;

/// A "worker" that registers but never serves: its task holds the iteration open
/// until the test reports it finished.
struct Ghost {
    dispatcher: DispatcherClient,
    hb: pb::WorkerHeartbeatRequest,
}

impl Ghost {
    async fn register(dispatcher: &DispatcherClient) -> Ghost {
        let address = "127.0.0.1:9".to_string();
        let reg = pb::RegisterWorkerRequest {
            address: address.clone(),
            worker_uid: 1,
            functions: vec![],
            python_version: String::new(),
        };
        dispatcher.register_worker(reg).await.unwrap();
        let hb = pb::WorkerHeartbeatRequest { address, worker_uid: 1, ..Default::default() };
        Ghost { dispatcher: dispatcher.clone(), hb }
    }

    async fn finish_its_task(&self) {
        let task =
            self.dispatcher.worker_heartbeat(self.hb.clone()).await.unwrap().new_tasks[0].task_id;
        let report = pb::WorkerHeartbeatRequest { finished_tasks: vec![task], ..self.hb.clone() };
        self.dispatcher.worker_heartbeat(report).await.unwrap();
    }
}

/// Joins a new OFF iteration of `range(3)`; returns its client id.
async fn join_iteration(d: &DispatcherClient) -> u64 {
    let dataset_id = d
        .register_dataset(pb::RegisterDatasetRequest {
            dataset: Some((&DatasetDef::range(3)).into()),
            dataset_id: String::new(),
        })
        .await
        .unwrap()
        .dataset_id;
    let job = d
        .get_or_create_job(pb::GetOrCreateJobRequest {
            dataset_id,
            mode: pb::ProcessingMode::Off as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    let req =
        pb::GetOrCreateIterationRequest { job_id: job.job_id, repetition: 0, ..Default::default() };
    d.get_or_create_iteration(req).await.unwrap().client_id
}

fn long_poll(client_id: u64, known_view: u64, wait: Duration) -> pb::ClientHeartbeatRequest {
    pb::ClientHeartbeatRequest {
        client_id,
        known_view,
        wait_for_change_ms: wait.as_millis() as u32,
        ..Default::default()
    }
}

async fn grpc(address: &str) -> Grpc<tonic::transport::Channel> {
    Grpc::connect(format!("http://{address}")).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_ends_when_the_long_poll_sees_the_iteration_finish() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let ghost = Ghost::register(client.dispatcher()).await;
    // Polling once an hour: only the long poll can end this read within DEADLINE.
    let opts = ReadOptions {
        heartbeat_interval: LONG,
        ..ReadOptions::new(ProcessingMode::Dynamic).worker_retry(RetryPolicy::for_tests())
    };
    let mut stream = client.distribute(&DatasetDef::range(10), opts).await.unwrap();
    let mut got = vec![];
    for _ in 0..10 {
        let e = tokio::time::timeout(DEADLINE, stream.next()).await.expect("an element");
        got.push(e.unwrap().unwrap().as_i64().unwrap());
    }
    got.sort();
    assert_eq!(got, (0..10).collect::<Vec<_>>(), "the real worker took every split");
    tracing::info!("--- J3: long polls answered unchanged (1 s waits) do not end the stream");
    let early = tokio::time::timeout(Duration::from_millis(1500), stream.next()).await;
    assert!(early.is_err(), "the stream ended before the iteration finished: {early:?}");
    tracing::info!("--- the ghost reports its task finished");
    ghost.finish_its_task().await;
    let end = tokio::time::timeout(DEADLINE, stream.next()).await.expect("the stream ends");
    assert!(end.is_none(), "end of sequence, not an error: {end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_is_answered_when_the_iteration_finishes() {
    let cluster = Cluster::start_with(0, patient_config()).await;
    let d = cluster.client().dispatcher().clone();
    let ghost = Ghost::register(&d).await;
    let client_id = join_iteration(&d).await;
    let mut dispatcher = grpc(&cluster.dispatcher_address).await;
    let first = dispatcher.client_heartbeat(long_poll(client_id, 0, LONG)).await.unwrap();
    let first = first.into_inner();
    assert_ne!(first.view_digest, 0, "no view known yet: answered at once, with a digest");
    assert!(!first.iteration_finished);
    tracing::info!("--- an hour-long poll on the current view, then the iteration finishes");
    let poll = tokio::spawn(async move {
        dispatcher.client_heartbeat(long_poll(client_id, first.view_digest, LONG)).await
    });
    ghost.finish_its_task().await;
    let answer = tokio::time::timeout(DEADLINE, poll).await.expect("answered at the change");
    let answer = answer.unwrap().unwrap().into_inner();
    assert!(answer.iteration_finished, "{answer:?}");
    assert!(answer.tasks.iter().all(|t| t.finished), "{answer:?}");
    assert_ne!(answer.view_digest, first.view_digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_view_is_answered_unchanged_after_the_wait_and_a_stale_one_at_once() {
    let cluster = Cluster::start_with(0, patient_config()).await;
    let d = cluster.client().dispatcher().clone();
    let ghost = Ghost::register(&d).await;
    let client_id = join_iteration(&d).await;
    let mut dispatcher = grpc(&cluster.dispatcher_address).await;
    let first = dispatcher.client_heartbeat(long_poll(client_id, 0, LONG)).await.unwrap();
    let first = first.into_inner();
    tracing::info!("--- nothing changes: the answer comes at the end of a short wait");
    let wait = Duration::from_millis(200);
    let same = dispatcher.client_heartbeat(long_poll(client_id, first.view_digest, wait));
    let same = tokio::time::timeout(DEADLINE, same).await.expect("answered after the wait");
    assert_eq!(same.unwrap().into_inner(), first);
    tracing::info!("--- the view changed before the call: answered at once despite an hour's wait");
    ghost.finish_its_task().await;
    let stale = dispatcher.client_heartbeat(long_poll(client_id, first.view_digest, LONG));
    let stale = tokio::time::timeout(DEADLINE, stale).await.expect("answered at once");
    assert!(stale.unwrap().into_inner().iteration_finished);
    tracing::info!("--- an unknown client is refused at once");
    let unknown = dispatcher.client_heartbeat(long_poll(client_id + 1000, 1, LONG));
    let unknown = tokio::time::timeout(DEADLINE, unknown).await.expect("refused at once");
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_refuses_a_long_poll_at_once_naming_the_leader() {
    common::init_tracing();
    let (mut listeners, mut raft_listeners) = (vec![], vec![]);
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
        raft_listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let by_id = |ls: &[TcpListener]| -> BTreeMap<u64, String> {
        ls.iter()
            .enumerate()
            .map(|(i, l)| (i as u64 + 1, l.local_addr().unwrap().to_string()))
            .collect()
    };
    let (peers, raft_peers) = (by_id(&listeners), by_id(&raft_listeners));
    let mut nodes = vec![];
    for (i, (listener, raft)) in listeners.into_iter().zip(raft_listeners).enumerate() {
        let config = DispatcherConfig {
            node_id: i as u64 + 1,
            peers: peers.clone(),
            raft_peers: raft_peers.clone(),
            max_client_wait: LONG,
            ..DispatcherConfig::default()
        };
        let registry = FunctionRegistry::builtin();
        nodes.push(sluice_dispatcher::spawn_with_raft(listener, Some(raft), config, registry));
    }
    let _nodes = futures::future::try_join_all(nodes).await.unwrap();
    let addresses: Vec<String> = peers.values().cloned().collect();
    let d = DispatcherClient::new(&addresses, RetryPolicy::for_tests()).unwrap();
    let client_id = join_iteration(&d).await;
    let leader = d.get_status().await.unwrap().raft.unwrap().leader_address;
    let follower = addresses.iter().find(|a| **a != leader).unwrap();
    tracing::info!(%follower, %leader, "--- an hour-long poll at a follower");
    let mut at_follower = grpc(follower).await;
    let refused = at_follower.client_heartbeat(long_poll(client_id, 1, LONG));
    let refused = tokio::time::timeout(DEADLINE, refused).await.expect("refused at once");
    let status = refused.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let named = sluice_proto::contract::leader_address(&status);
    assert_eq!(named, Some(leader.as_str()));
}
