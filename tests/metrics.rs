//! Prometheus metrics over real processes: `sluice dispatcher --metrics-addr` and
//! `sluice worker --metrics-addr`, scraped with a plain HTTP client; every scrape
//! must parse as OpenMetrics text (`sluice_metrics::parse`).
//!
//! Every wait is on a condition with a deadline (`common::wait_until`). The
//! Grafana dashboard's metrics are checked against these processes in
//! `grafana_dashboard.rs`.

mod common;

use common::scrape::{scrape, scrape_until};
use common::{collect_i64, Port, Proc};
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_metrics::{value, Sample};

/// A port for `--metrics-addr`, reserved for the test's life (`Port::address`).
fn metrics_port() -> Port {
    Port::reserve().expect("a loopback port")
}

fn worker(dispatcher: &str, extra: &[&str]) -> Proc {
    let mut args =
        vec!["worker", "--dispatcher", dispatcher, "--port", "0", "--timeout-secs", "20"];
    args.extend_from_slice(extra);
    common::server(&args)
}

fn client(d: &str) -> Client {
    Client::new(&[d.to_string()], RetryPolicy::for_tests()).unwrap()
}

fn gauge(s: &[Sample], name: &str) -> f64 {
    value(s, name, &[]).unwrap_or_else(|| panic!("{name} is exposed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_worker_in_dynamic_mode_shows_in_the_lost_worker_and_lost_split_metrics() {
    let mport = metrics_port();
    let maddr = mport.address();
    let d = common::server(&[
        "dispatcher",
        "--port",
        "0",
        "--worker-timeout-secs",
        "2",
        "--elements-per-split",
        "10",
        "--metrics-addr",
        &maddr,
    ]);
    let d = d.address().to_string();
    let s = scrape_until(&maddr, "the dispatcher's metrics", |s| {
        value(s, "sluice_raft_leader", &[]) == Some(1.0)
    })
    .await;
    assert_eq!(gauge(&s, "sluice_workers_lost"), 0.0);
    assert_eq!(gauge(&s, "sluice_lost_splits"), 0.0);

    // One worker, so the task killed is the one that was reading a split; one
    // split per grant, so each split read is a GetSplit request.
    let mut w = worker(&d, &["--buffer", "4", "--splits-per-request", "1"]);
    let c = client(&d);
    scrape_until(&maddr, "one registered worker", |s| gauge(s, "sluice_workers_registered") == 1.0)
        .await;
    let mut opts = ReadOptions::new(ProcessingMode::Dynamic)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests());
    opts.max_elements_per_message = 8;
    let mut stream = c.distribute(&DatasetDef::range(5000), opts).await.unwrap();
    for _ in 0..50 {
        stream.next().await.expect("an element").expect("an element");
    }
    let s = scrape(&maddr).await.expect("a scrape");
    assert_eq!(gauge(&s, "sluice_iterations_active"), 1.0);
    assert_eq!(gauge(&s, "sluice_clients_active"), 1.0);
    assert!(gauge(&s, "sluice_splits_handed_out") >= 5.0, "50 elements read, 10 per split");
    assert!(value(&s, "sluice_get_split_requests_total", &[]).unwrap_or(0.0) >= 5.0);

    tracing::info!("--- SIGKILL the worker mid-split; the worker timeout declares it lost");
    w.kill();
    drop(stream);
    let s = scrape_until(&maddr, "the worker declared lost", |s| {
        gauge(s, "sluice_workers_lost") == 1.0
    })
    .await;
    assert_eq!(gauge(&s, "sluice_workers_registered"), 0.0);
    assert_eq!(gauge(&s, "sluice_lost_tasks"), 1.0);
    assert!(gauge(&s, "sluice_lost_splits") > 0.0, "the split it was reading is lost");
    assert_eq!(gauge(&s, "sluice_iterations_finished"), 1.0, "its only task ended");
    assert_eq!(gauge(&s, "sluice_iterations_active"), 0.0);
    let lost = value(&s, "sluice_commands_proposed_total", &[("kind", "WorkerLost")]);
    assert!(lost >= Some(1.0), "WorkerLost was proposed: {lost:?}");

    tracing::info!("--- the metrics say what GetStatus says");
    let status = c.status().await.expect("status");
    let it = &status.jobs[0].iterations[0];
    assert_eq!(gauge(&s, "sluice_lost_splits"), it.lost_splits as f64);
    assert_eq!(gauge(&s, "sluice_lost_elements"), it.lost_elements as f64);
    assert_eq!(gauge(&s, "sluice_lost_tasks"), f64::from(it.lost_tasks));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_elements_streamed_counter_grows_with_a_read() {
    let d = common::server(&["dispatcher", "--port", "0"]);
    let d = d.address().to_string();
    let mport = metrics_port();
    let maddr = mport.address();
    let _w = worker(&d, &["--metrics-addr", &maddr]);
    let s = scrape_until(&maddr, "the worker's metrics", |_| true).await;
    assert_eq!(value(&s, "sluice_elements_streamed_total", &[]), Some(0.0));
    assert_eq!(gauge(&s, "sluice_tasks_running"), 0.0);

    let c = client(&d);
    common::wait_until("the worker registered", || {
        let c = c.clone();
        async move { c.status().await.is_ok_and(|s| s.workers.len() == 1) }
    })
    .await;
    let opts = ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests());
    let got = collect_i64(c.distribute(&DatasetDef::range(100), opts).await.unwrap()).await;
    assert_eq!(got.len(), 100);

    let s = scrape(&maddr).await.expect("a scrape");
    let elements = value(&s, "sluice_elements_streamed_total", &[]).unwrap();
    assert!(elements >= 100.0, "{elements} elements streamed, 100 read");
    assert!(value(&s, "sluice_streamed_bytes_total", &[]).unwrap() > 0.0);
    assert!(value(&s, "sluice_streams_opened_total", &[]).unwrap() >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_sums_the_elements_its_workers_ignore_errors_skipped() {
    let mport = metrics_port();
    let maddr = mport.address();
    let d = common::server(&["dispatcher", "--port", "0", "--metrics-addr", &maddr]);
    let s = scrape_until(&maddr, "the dispatcher's metrics", |s| {
        value(s, "sluice_raft_leader", &[]) == Some(1.0)
    })
    .await;
    assert_eq!(gauge(&s, "sluice_worker_errors_ignored"), 0.0);
    // Two workers (the test speaking the protocol) report their running totals.
    let dispatcher = client(d.address()).dispatcher().clone();
    for (address, uid, ignored) in [("127.0.0.1:7001", 1, 3), ("127.0.0.1:7002", 2, 4)] {
        let req = sluice_proto::v1::RegisterWorkerRequest {
            address: address.into(),
            worker_uid: uid,
            ..Default::default()
        };
        dispatcher.register_worker(req).await.unwrap();
        let hb = sluice_proto::v1::WorkerHeartbeatRequest {
            address: address.into(),
            worker_uid: uid,
            errors_ignored: ignored,
            ..Default::default()
        };
        dispatcher.worker_heartbeat(hb).await.unwrap();
    }
    let s = scrape(&maddr).await.expect("a scrape");
    assert_eq!(gauge(&s, "sluice_worker_errors_ignored"), 7.0);
}

/// One worker, an OFF read of a named job to its end: the worker's per-job
/// counters and this process's client metrics (the reader is in-process) count
/// exactly the elements read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delivered_elements_per_job_and_the_client_wait_histogram_count_exactly_what_was_read() {
    let d = common::server(&["dispatcher", "--port", "0"]);
    let d = d.address().to_string();
    let mport = metrics_port();
    let maddr = mport.address();
    let _w = worker(&d, &["--metrics-addr", &maddr]);
    let c = client(&d);
    common::wait_until("the worker registered", || {
        let c = c.clone();
        async move { c.status().await.is_ok_and(|s| s.workers.len() == 1) }
    })
    .await;
    let opts = ReadOptions::new(ProcessingMode::Off)
        .job_name("metrics-exact")
        .worker_retry(RetryPolicy::for_tests());
    let got = collect_i64(c.distribute(&DatasetDef::range(100), opts).await.unwrap()).await;
    assert_eq!(got.len(), 100);

    let job = [("sluice_job", "metrics-exact")];
    let s = scrape(&maddr).await.expect("a scrape");
    assert_eq!(value(&s, "sluice_worker_elements_delivered_total", &job), Some(100.0));
    assert!(value(&s, "sluice_worker_bytes_delivered_total", &job).unwrap() >= 800.0);

    let s = sluice_metrics::parse(&sluice_client::metrics::encode()).expect("parses");
    let read = [("sluice_job", "metrics-exact"), ("consumer", "")];
    assert_eq!(value(&s, "sluice_client_wait_seconds_count", &read), Some(100.0));
    assert!(value(&s, "sluice_client_wait_seconds_sum", &read).unwrap() > 0.0);
    assert_eq!(value(&s, "sluice_client_elements_total", &read), Some(100.0));
    assert_eq!(value(&s, "sluice_client_bytes_total", &read), Some(800.0), "int64 scalars");
}

/// A DYNAMIC read through one dispatcher: it times its Raft commits and journal
/// writes, and its split grants cover the source exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dispatcher_times_commits_and_journal_writes_and_counts_the_split_elements_it_grants() {
    let mport = metrics_port();
    let maddr = mport.address();
    let work = tempfile::tempdir().unwrap();
    let work_dir = work.path().to_str().unwrap();
    let d = common::server(&[
        "dispatcher",
        "--port",
        "0",
        "--work-dir",
        work_dir,
        "--elements-per-split",
        "10",
        "--metrics-addr",
        &maddr,
    ]);
    let d = d.address().to_string();
    // One split per grant: 10 grants, each a commit.
    let _w = worker(&d, &["--splits-per-request", "1"]);
    let c = client(&d);
    common::wait_until("the worker registered", || {
        let c = c.clone();
        async move { c.status().await.is_ok_and(|s| s.workers.len() == 1) }
    })
    .await;
    let opts = ReadOptions::new(ProcessingMode::Dynamic).worker_retry(RetryPolicy::for_tests());
    let got = collect_i64(c.distribute(&DatasetDef::range(100), opts).await.unwrap()).await;
    assert_eq!(got.len(), 100);

    let s = scrape(&maddr).await.expect("a scrape");
    assert_eq!(value(&s, "sluice_split_elements_granted_total", &[]), Some(100.0));
    assert!(value(&s, "sluice_split_grants_total", &[]).unwrap() >= 10.0, "10 per split");
    let commits = value(&s, "sluice_raft_commit_seconds_count", &[]).unwrap();
    let fsyncs = value(&s, "sluice_journal_fsync_seconds_count", &[]).unwrap();
    assert!(commits >= 10.0, "at least the 10 GetSplit commits: {commits}");
    // Not one per commit: openraft may append several entries in one write.
    assert!(fsyncs >= 1.0, "the commits were written to the journal: {fsyncs}");
    assert!(value(&s, "sluice_raft_commit_seconds_sum", &[]).unwrap() > 0.0);
    assert_eq!(
        value(&s, "sluice_raft_commit_seconds_bucket", &[("le", "+Inf")]),
        Some(commits),
        "the histogram's +Inf bucket holds every commit"
    );
    // One observation per committed entry: how many commands it carried.
    let entries = value(&s, "sluice_raft_batch_commands_count", &[]).unwrap();
    assert_eq!(entries, commits, "one batch size per committed entry");
    let commands = value(&s, "sluice_raft_batch_commands_sum", &[]).unwrap();
    assert!(commands >= entries.max(10.0), "at least the 10 GetSplits: {commands}");
}
