//! What one caller can make the dispatcher do or hold, through its gRPC service:
//! a worker is bound to the process it registered as, and per-dispatcher caps
//! answer ResourceExhausted naming the cap and its flag (issue 14, "Limits on
//! what one client can make the service hold").

mod common;

use common::{collect_i64, Cluster};
use sluice_client::{Client, ProcessingMode, ReadOptions};
use sluice_dataset::DatasetDef;
use sluice_dispatcher::{DispatcherConfig, Limits};
use sluice_proto::v1 as pb;
use tonic::Code;

/// A DYNAMIC job's iteration over `range(n)`: (iteration id, client id).
async fn dynamic_iteration(client: &Client, n: i64) -> (u64, u64) {
    let d = client.dispatcher();
    let dataset_id = client.register_dataset(&DatasetDef::range(n), None).await.unwrap();
    let job = pb::GetOrCreateJobRequest {
        dataset_id,
        mode: pb::ProcessingMode::Dynamic as i32,
        ..Default::default()
    };
    let job_id = d.get_or_create_job(job).await.unwrap().job_id;
    let it = pb::GetOrCreateIterationRequest { job_id, repetition: 0 };
    let r = d.get_or_create_iteration(it).await.unwrap();
    (r.iteration_id, r.client_id)
}

fn split_request(task_id: u64, worker_uid: u64, sequence: u64) -> pb::GetSplitRequest {
    pb::GetSplitRequest { task_id, worker_uid, sequence, max_splits: 1, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_another_worker_incarnation_is_refused_and_takes_nothing() {
    // No real worker: the test speaks the worker protocol itself.
    let cluster = Cluster::start(0).await;
    let client = cluster.client();
    let d = client.dispatcher();
    let address = "127.0.0.1:9".to_string();
    let register = |uid| pb::RegisterWorkerRequest {
        address: address.clone(),
        worker_uid: uid,
        functions: vec![],
    };
    d.register_worker(register(1)).await.unwrap();
    let _ = dynamic_iteration(&client, 10).await;
    // The registration answers nothing for an iteration made after it; the
    // heartbeat of the registered process gets the task.
    let hb = |uid, finished: Vec<u64>| pb::WorkerHeartbeatRequest {
        address: address.clone(),
        worker_uid: uid,
        finished_tasks: finished,
        ..Default::default()
    };
    let tasks = d.worker_heartbeat(hb(1, vec![])).await.unwrap().new_tasks;
    let task = tasks[0].task_id;

    let forged = d.get_split(split_request(task, 2, 0)).await.unwrap_err();
    assert_eq!(forged.code(), Some(Code::FailedPrecondition), "{forged}");
    let msg = forged.to_string();
    assert!(msg.contains("worker_uid 1") && msg.contains("worker_uid 2"), "{msg}");
    let err = d.worker_heartbeat(hb(2, vec![task])).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition), "{err}");
    assert!(err.to_string().contains("worker_uid 2"), "{err}");

    // Nothing was taken: the registered process gets the first split.
    let first = d.get_split(split_request(task, 1, 0)).await.unwrap();
    assert_eq!(first.split.map(|s| (s.begin, s.end)), Some((0, 1)));
    // And the forged report finished nothing.
    let status = client.status().await.unwrap();
    let finished: Vec<u32> =
        status.jobs.iter().flat_map(|j| &j.iterations).map(|it| it.finished_tasks).collect();
    assert_eq!(finished, vec![0], "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_at_a_cap_answers_resource_exhausted_naming_the_flag() {
    let limits = Limits { max_datasets: 2, max_jobs: 1, ..Limits::default() };
    let cluster = Cluster::start_with(1, DispatcherConfig { limits, ..Default::default() }).await;
    let client = cluster.client();
    let a = client.register_dataset(&DatasetDef::range(3), Some("a")).await.unwrap();
    client.register_dataset(&DatasetDef::range(4), Some("b")).await.unwrap();
    let err = client.register_dataset(&DatasetDef::range(5), None).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::ResourceExhausted), "{err}");
    assert!(err.to_string().contains("--max-datasets 2"), "{err}");
    // The datasets held still serve, up to the job cap.
    let read = ReadOptions::new(ProcessingMode::Off).job_name("only");
    let got = collect_i64(client.from_dataset_id(&a, read).await.unwrap()).await;
    assert_eq!(got, vec![0, 1, 2]);
    let err = match client.from_dataset_id(&a, ReadOptions::new(ProcessingMode::Off)).await {
        Err(e) => e,
        Ok(_) => panic!("a second job past --max-jobs 1 was created"),
    };
    assert_eq!(err.code(), Some(Code::ResourceExhausted), "{err}");
    assert!(err.to_string().contains("--max-jobs 1"), "{err}");
}
