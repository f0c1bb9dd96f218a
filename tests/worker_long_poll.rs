//! A worker learns of a new task through a held `WorkerHeartbeat` the dispatcher
//! answers when the task is created, not at the worker's next heartbeat. Deadlines
//! only: the heartbeat interval and the dispatcher's wait are an hour, so only the
//! wake-up on a change can pass them.

mod common;

use std::time::Duration;

use common::{collect_i64, patient_config, Cluster, DEADLINE, LONG};
use sluice_client::{ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_dispatcher::DispatcherConfig;
use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_client::DispatcherClient as Grpc;
use sluice_worker::WorkerConfig;

/// A patient dispatcher that never times a worker out.
async fn patient_cluster() -> Cluster {
    let config = DispatcherConfig { worker_timeout: Duration::ZERO, ..patient_config() };
    Cluster::start_with(0, config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_heartbeat_is_answered_when_a_task_is_created_for_the_worker() {
    let cluster = patient_cluster().await;
    let client = cluster.client();
    let address = "127.0.0.1:9".to_string();
    let reg = pb::RegisterWorkerRequest {
        address: address.clone(),
        worker_uid: 1,
        functions: vec![],
        python_version: String::new(),
    };
    client.dispatcher().register_worker(reg).await.unwrap();
    let mut grpc = Grpc::connect(format!("http://{}", cluster.dispatcher_address)).await.unwrap();
    let hb = pb::WorkerHeartbeatRequest {
        address,
        worker_uid: 1,
        wait_for_change_ms: LONG.as_millis() as u32,
        ..Default::default()
    };
    let held = tokio::spawn(async move { grpc.worker_heartbeat(hb).await });
    // A job made after the heartbeat was sent: its task must wake the held answer.
    let opts = ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests());
    let _stream = client.distribute(&DatasetDef::range(3), opts).await.unwrap();
    let answer = tokio::time::timeout(DEADLINE, held)
        .await
        .expect("the held heartbeat is answered when the task is created")
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(answer.new_tasks.len(), 1, "answered with the new task: {answer:?}");
    assert!(answer.long_polled, "the dispatcher says it held the answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_heartbeating_once_an_hour_starts_new_jobs_and_their_epochs_end() {
    let mut cluster = patient_cluster().await;
    let mut config = WorkerConfig::for_tests(cluster.addresses());
    config.heartbeat_interval = LONG;
    cluster.add_worker_with(config).await;
    cluster.wait_workers(1).await;
    // The worker registered before the jobs existed: it can only learn of their
    // tasks through held heartbeats. The second job comes after the worker
    // reported the first task finished (an answer it did not ask to be held), so
    // the worker must go back to a held poll rather than wait out its interval.
    for job in 0..2 {
        let opts = ReadOptions::new(ProcessingMode::Dynamic).worker_retry(RetryPolicy::for_tests());
        let stream = cluster.client().distribute(&DatasetDef::range(100), opts).await.unwrap();
        let mut got = tokio::time::timeout(DEADLINE, collect_i64(stream))
            .await
            .unwrap_or_else(|_| panic!("job {job}: the task started and the epoch ended in time"));
        got.sort();
        assert_eq!(got, (0..100).collect::<Vec<_>>(), "job {job}");
    }
}
