//! Prometheus metrics over real processes: `sluice dispatcher --metrics-addr` and
//! `sluice worker --metrics-addr`, scraped with a plain HTTP client; every scrape
//! must parse as OpenMetrics text (`sluice_metrics::parse`).
//!
//! Every wait is on a condition with a deadline (`common::wait_until`).

mod common;

use common::{collect_i64, Port, Proc};
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_metrics::{parse, value, Sample};

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

/// GET http://ADDR/metrics, parsed; `None` while the endpoint does not answer.
async fn scrape(addr: &str) -> Option<Vec<Sample>> {
    // reqwest is built without a default TLS provider; plain HTTP still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let resp = reqwest::get(format!("http://{addr}/metrics")).await.ok()?;
    assert_eq!(resp.status(), 200, "GET /metrics");
    let content_type = resp.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap();
    assert_eq!(content_type, sluice_metrics::CONTENT_TYPE);
    let text = resp.text().await.expect("the scrape's body");
    Some(parse(&text).unwrap_or_else(|e| panic!("the exposition parses: {e}\n{text}")))
}

/// Scrapes until `cond` holds; returns that scrape. Panics after `common::DEADLINE`.
async fn scrape_until(addr: &str, what: &str, cond: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let start = std::time::Instant::now();
    loop {
        match scrape(addr).await {
            Some(s) if cond(&s) => return s,
            last => assert!(
                start.elapsed() < common::DEADLINE,
                "timed out waiting for {what}; last scrape: {last:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
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

    // One worker, so the task killed is the one that was reading a split.
    let mut w = worker(&d, &["--buffer", "4"]);
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
