//! The exactly-once RPCs of a real dispatcher on loopback (docs/exactly-once.md):
//! job creation answers its delivery (and refuses what cannot be replayed), task
//! definitions say exactly-once, a heartbeat's consumed report is applied even
//! when the long poll's view does not change, and a restore starts a new
//! iteration (bad positions refused).

use std::time::Duration;

use sluice_dataset::{DatasetDef, FunctionRegistry};
use sluice_dispatcher::DispatcherConfig;
use sluice_positions::{Position, RecordSet};
use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_client::DispatcherClient;
use tonic::transport::Channel;
use tonic::Code;

async fn start() -> (sluice_dispatcher::DispatcherHandle, DispatcherClient<Channel>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = DispatcherConfig { elements_per_split: 1, ..Default::default() };
    let handle =
        sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
    let client = DispatcherClient::connect(format!("http://{}", handle.address())).await.unwrap();
    (handle, client)
}

/// Registers `def`, retrying while the single node elects itself.
async fn register(c: &mut DispatcherClient<Channel>, def: &DatasetDef) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let req = pb::RegisterDatasetRequest {
            dataset: Some(pb::DatasetDef::from(def)),
            ..Default::default()
        };
        match c.register_dataset(req).await {
            Ok(r) => return r.into_inner().dataset_id,
            Err(e) if e.code() == Code::Unavailable && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn job_req(ds: &str, name: &str, require: bool) -> pb::GetOrCreateJobRequest {
    pb::GetOrCreateJobRequest {
        dataset_id: ds.into(),
        job_name: name.into(),
        mode: pb::ProcessingMode::Dynamic as i32,
        require_exactly_once: require,
        ..Default::default()
    }
}

/// `prefer_exactly_once` (Rust `exactly_once_auto`, Python `exactly_once="auto"`):
/// exactly-once where the job can have it, at-most-once with the reason where
/// it cannot, never a refusal.
#[tokio::test]
async fn preferred_exactly_once_falls_back_to_at_most_once_with_the_reason() {
    let (_handle, mut c) = start().await;
    let prefer = |ds: &str, name: &str| pb::GetOrCreateJobRequest {
        prefer_exactly_once: true,
        ..job_req(ds, name, false)
    };
    let ds = register(&mut c, &DatasetDef::range(10)).await;
    let eo = c.get_or_create_job(prefer(&ds, "auto")).await.unwrap().into_inner();
    assert_eq!(eo.delivery, pb::Delivery::ExactlyOnce as i32);
    assert!(eo.at_most_once_reason.is_empty());
    let repeated = register(&mut c, &DatasetDef::range(10).repeat(2)).await;
    let amo = c.get_or_create_job(prefer(&repeated, "auto-r")).await.unwrap().into_inner();
    assert_eq!(amo.delivery, pb::Delivery::AtMostOnce as i32);
    assert!(amo.at_most_once_reason.contains("repeat"), "{amo:?}");
    let off = pb::GetOrCreateJobRequest {
        mode: pb::ProcessingMode::Off as i32,
        ..prefer(&ds, "auto-off")
    };
    let amo = c.get_or_create_job(off).await.unwrap().into_inner();
    assert_eq!(amo.delivery, pb::Delivery::AtMostOnce as i32);
    assert!(amo.at_most_once_reason.contains("DYNAMIC"), "{amo:?}");
    // A job of that name created at-most-once is joined as it is, saying why.
    c.get_or_create_job(job_req(&ds, "plain", false)).await.unwrap();
    let joined = c.get_or_create_job(prefer(&ds, "plain")).await.unwrap().into_inner();
    assert_eq!(joined.delivery, pb::Delivery::AtMostOnce as i32);
    assert!(joined.at_most_once_reason.contains("created at-most-once"), "{joined:?}");
    // An exactly-once job is joined exactly-once; require still refuses.
    let again = c.get_or_create_job(prefer(&ds, "auto")).await.unwrap().into_inner();
    assert_eq!((again.job_id, again.delivery), (eo.job_id, pb::Delivery::ExactlyOnce as i32));
    let both = pb::GetOrCreateJobRequest { require_exactly_once: true, ..prefer(&repeated, "x") };
    let err = c.get_or_create_job(both).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "require wins over prefer");
}

#[tokio::test]
async fn exactly_once_jobs_reports_and_restores_over_grpc() {
    let (handle, mut c) = start().await;
    let ds = register(&mut c, &DatasetDef::range(10)).await;
    let eo = c.get_or_create_job(job_req(&ds, "eo", true)).await.unwrap().into_inner();
    assert_eq!(eo.delivery, pb::Delivery::ExactlyOnce as i32);
    assert!(eo.at_most_once_reason.is_empty());
    let plain = c.get_or_create_job(job_req(&ds, "plain", false)).await.unwrap().into_inner();
    assert_eq!(plain.delivery, pb::Delivery::AtMostOnce as i32);
    assert!(plain.at_most_once_reason.contains("require_exactly_once"), "{plain:?}");
    let err = c.get_or_create_job(job_req(&ds, "plain", true)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("at-most-once"), "{err}");
    let repeated = register(&mut c, &DatasetDef::range(10).repeat(2)).await;
    let err = c.get_or_create_job(job_req(&repeated, "r", true)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains("repeat"), "{err}");

    let w = pb::RegisterWorkerRequest {
        address: "127.0.0.1:9".into(),
        worker_uid: 5,
        ..Default::default()
    };
    c.register_worker(w).await.unwrap();
    let it = pb::GetOrCreateIterationRequest { job_id: eo.job_id, ..Default::default() };
    let it = c.get_or_create_iteration(it).await.unwrap().into_inner();
    assert_eq!(it.delivery, pb::Delivery::ExactlyOnce as i32);
    let w = pb::RegisterWorkerRequest {
        address: "127.0.0.1:9".into(),
        worker_uid: 5,
        ..Default::default()
    };
    let tasks = c.register_worker(w).await.unwrap().into_inner().tasks;
    assert_eq!(tasks.len(), 1);
    assert!(tasks[0].exactly_once && !tasks[0].counted_units, "{:?}", tasks[0]);
    let split = pb::GetSplitRequest {
        task_id: tasks[0].task_id,
        worker_uid: 5,
        max_splits: 4,
        ..Default::default()
    };
    let split = c.get_split(split).await.unwrap().into_inner();
    assert_eq!(split.split.map(|s| (s.begin, s.end)), Some((0, 4)));

    let hb = |consumed: Option<pb::ConsumedReport>, known_view: u64| pb::ClientHeartbeatRequest {
        client_id: it.client_id,
        consumed,
        known_view,
        wait_for_change_ms: 100,
        ..Default::default()
    };
    let first = c.client_heartbeat(hb(None, 0)).await.unwrap().into_inner();
    assert_eq!(first.delivery, pb::Delivery::ExactlyOnce as i32);
    assert_eq!(first.checkpoint_watermark, 0);
    // The view does not change (same tasks): the long poll answers at its
    // deadline, and the report was applied all the same.
    let report = pb::ConsumedReport { runs: vec![0, 0, 1, 1, 0, 1], ..Default::default() };
    let second =
        c.client_heartbeat(hb(Some(report), first.view_digest)).await.unwrap().into_inner();
    assert_eq!(second.view_digest, first.view_digest);
    assert_eq!((second.checkpoint_watermark, second.checkpoint_generation), (2, 0));
    let flood = pb::ConsumedReport { runs: [1, 0, 1].repeat(65_537), ..Default::default() };
    let err = c.client_heartbeat(hb(Some(flood), 0)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("65537 runs"), "{err}");
    // A span of first records: units 2 and 3 in one entry.
    let spans = pb::ConsumedReport { firsts: vec![2, 2], ..Default::default() };
    let third = c.client_heartbeat(hb(Some(spans), 0)).await.unwrap().into_inner();
    assert_eq!((third.checkpoint_watermark, third.checkpoint_generation), (4, 0));
    let ragged = pb::ConsumedReport { firsts: vec![4, 1, 5], ..Default::default() };
    let err = c.client_heartbeat(hb(Some(ragged), 0)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("3 span numbers"), "{err}");

    let position = |job_name: &str| Position {
        job_name: job_name.into(),
        dataset_id: ds.clone(),
        repetition: 0,
        generation: 1,
        consumed: RecordSet::below(6),
        merged_consumers: 1,
    };
    let restore = |p: Position| pb::GetOrCreateIterationRequest {
        job_id: eo.job_id,
        restore: Some(p.to_pb()),
        ..Default::default()
    };
    let restored = c.get_or_create_iteration(restore(position("eo"))).await.unwrap().into_inner();
    assert_ne!(restored.iteration_id, it.iteration_id);
    assert_eq!(restored.delivery, pb::Delivery::ExactlyOnce as i32);
    let err = c.get_or_create_iteration(restore(position("other"))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let mut garbage = position("eo").to_pb();
    garbage.format = 0;
    let req = pb::GetOrCreateIterationRequest {
        job_id: eo.job_id,
        restore: Some(garbage),
        ..Default::default()
    };
    let err = c.get_or_create_iteration(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("restore"), "{err}");
    handle.shutdown().await.unwrap();
}

/// A group member's Raft port listens once `spawn` returns: a caller may add it
/// to the group at once (Python's `DispatchServer` then `admin.add_dispatcher`),
/// and the group dials that port. It was bound inside the spawned task, and the
/// dial lost the race on a busy machine.
#[tokio::test]
async fn a_spawned_group_member_listens_for_raft_before_spawn_returns() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = listener.local_addr().unwrap();
    let free = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (r1, c2, r2) = (free(), free(), free());
    let (peers, raft_peers) =
        sluice_dispatcher::parse_group(&format!("1={client}/{r1},2={c2}/{r2}")).unwrap();
    let config = DispatcherConfig { peers, raft_peers, node_id: 1, ..Default::default() };
    let handle =
        sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
    // On this single-threaded runtime the server's task has not run yet.
    tokio::net::TcpStream::connect(&r1).await.expect("the Raft port listens");
    handle.shutdown().await.unwrap();
}
