//! An in-memory dispatcher that restarts loses its state (it warns about this);
//! workers notice, forget every task id they knew, and serve the new dispatcher's
//! tasks, even when the new dispatcher reuses the same task ids.

mod common;

use common::{collect_i64, Cluster};
use sluice_client::{ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_serve_a_restarted_in_memory_dispatcher_that_reuses_task_ids() {
    let mut cluster = Cluster::start(1).await;
    let opts = || ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests());
    let def = DatasetDef::range(20);
    let first = cluster.client().distribute(&def, opts()).await.unwrap();
    assert_eq!(collect_i64(first).await, (0..20).collect::<Vec<_>>());

    tracing::info!("--- restart the dispatcher on the same address, with empty state");
    cluster.restart_dispatcher().await;
    cluster.wait_workers(1).await;

    // The new dispatcher numbers tasks from the start again: the worker must not
    // mistake the new task for the one it finished before the restart.
    let second = cluster.client().distribute(&DatasetDef::range(30), opts()).await.unwrap();
    assert_eq!(collect_i64(second).await, (0..30).collect::<Vec<_>>());
}
