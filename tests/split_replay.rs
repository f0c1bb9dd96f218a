//! Dynamic sharding's hand-out is idempotent per (task, worker_uid, sequence): a
//! replayed request gets the same split, and no split is lost or doubled.

mod common;

use common::Cluster;
use sluice_client::{DispatcherClient, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_get_split_returns_the_same_split_and_none_is_lost_or_doubled() {
    // No workers of ours: this test plays the worker over raw gRPC.
    let cluster = Cluster::start(0).await;
    let d = DispatcherClient::new(&cluster.addresses(), RetryPolicy::for_tests()).unwrap();
    let worker = pb::RegisterWorkerRequest {
        address: "127.0.0.1:1".into(),
        worker_uid: 9,
        functions: vec![],
        python_version: String::new(),
    };
    d.register_worker(worker).await.unwrap();
    let client = cluster.client();
    let id = client.register_dataset(&DatasetDef::range(7), None).await.unwrap();
    let job = d
        .get_or_create_job(pb::GetOrCreateJobRequest {
            dataset_id: id,
            mode: pb::ProcessingMode::Dynamic as i32,
            job_name: String::new(),
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
    let hb = pb::WorkerHeartbeatRequest {
        address: "127.0.0.1:1".into(),
        worker_uid: 9,
        ..Default::default()
    };
    let task = d.worker_heartbeat(hb).await.unwrap().new_tasks[0].task_id;

    let get = |sequence: u64| {
        let d = d.clone();
        async move {
            let req = pb::GetSplitRequest {
                task_id: task,
                worker_uid: 9,
                sequence,
                split_provider_index: 0,
                repetition: 0,
                max_splits: 1,
            };
            d.get_split(req).await.unwrap()
        }
    };
    let mut seen = vec![];
    for seq in 0.. {
        let first = get(seq).await;
        // The reply was "lost": ask again with the same key.
        let replay = get(seq).await;
        assert_eq!(first, replay, "sequence {seq} replayed a different answer");
        if first.end_of_splits {
            break;
        }
        let s = first.split.unwrap();
        seen.extend(s.begin..s.end);
    }
    assert_eq!(seen, (0..7).collect::<Vec<u64>>(), "every split once, in order");
}
