//! The real `sluice` binary as separate processes on loopback: a dispatcher, two
//! workers, `register`, `read` and `status`; and a worker SIGKILLed and restarted.

mod common;

use common::{collect_i64, counts, run_sluice, Port, Proc};
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;

const SPEC: &str = r#"{"stages": [{"range": {"stop": 30}}, {"map": {"fn": "square"}}]}"#;

fn worker(dispatcher: &str, port: &str) -> Proc {
    common::server(&["worker", "--dispatcher", dispatcher, "--port", port, "--timeout-secs", "20"])
}

#[test]
fn dispatcher_two_workers_register_read_and_status_as_processes() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    let w1 = worker(&d, "0");
    let w2 = worker(&d, "0");

    let (ok, out, err) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(SPEC));
    assert!(ok, "register failed: {err}");
    let id = out.trim().to_string();
    assert!(!id.is_empty());

    // Both workers must be registered before the read, or one may miss the job.
    common::wait_blocking("two workers in `sluice status`", || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
        ok && out.contains(w1.address()) && out.contains(w2.address())
    });

    let args = ["read", "--dispatcher", &d, "--dataset-id", &id, "--mode", "distributed_epoch"];
    let (ok, out, err) = run_sluice(&args, None);
    assert!(ok, "read failed: {err}");
    let mut got: Vec<i64> =
        out.lines().map(|l| l.parse().expect("a JSON number per line")).collect();
    got.sort();
    assert_eq!(got, (0..30).map(|x| x * x).collect::<Vec<_>>());
    assert!(err.contains("read 30 elements"), "summary on stderr: {err}");

    let args = ["read", "--dispatcher", &d, "--dataset-id", &id, "--mode", "parallel_epochs"];
    let (ok, out, err) = run_sluice(&args, None);
    assert!(ok, "read failed: {err}");
    assert_eq!(out.lines().count(), 60, "each of two workers sends everything");

    let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
    assert!(ok);
    assert!(
        out.contains("WORKERS (2)") && out.contains("DYNAMIC") && out.contains("finished"),
        "{out}"
    );
}

#[test]
fn the_cli_explains_bad_input() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    let bad = r#"{"stages": [{"range": {"stop": 3}}, {"batch": {"drop_remainder": true}}]}"#;
    let (ok, _, err) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(bad));
    assert!(!ok);
    assert!(err.contains("stages[1]") && err.contains("size"), "{err}");
    let (ok, _, err) =
        run_sluice(&["read", "--dispatcher", &d, "--dataset-id", "x", "--mode", "sideways"], None);
    assert!(!ok);
    assert!(err.contains("sideways"), "{err}");
    let (ok, _, err) = run_sluice(&["read", "--dispatcher", &d, "--dataset-id", "missing"], None);
    assert!(!ok);
    assert!(err.contains("missing") && err.contains("not found"), "{err}");
    // Still serving.
    let (ok, out, _) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(SPEC));
    assert!(ok && !out.trim().is_empty());
}

#[test]
fn raft_timer_flags_are_checked_before_anything_starts() {
    let (ok, _, err) =
        run_sluice(&["dispatcher", "--port", "0", "--election-timeout-ms", "300"], None);
    assert!(!ok);
    assert!(err.contains("MIN..MAX") && err.contains("150..300"), "{err}");
    let args = ["dispatcher", "--port", "0", "--election-timeout-ms", "300..150"];
    let (ok, _, err) = run_sluice(&args, None);
    assert!(!ok);
    assert!(err.contains("election_timeout_min") && err.contains("300ms"), "{err}");
    let args = ["dispatcher", "--port", "0", "--raft-heartbeat-ms", "200"];
    let (ok, _, err) = run_sluice(&args, None);
    assert!(!ok, "a heartbeat above the election timeout must be refused");
    assert!(err.contains("heartbeat_interval") && err.contains("200ms"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_and_restarted_mid_job_starts_its_task_over_and_the_read_completes() {
    const N: i64 = 3000;
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    // Reserved, so the restarted worker finds its port free.
    let reserved = Port::reserve().unwrap();
    let port = reserved.number().to_string();
    let mut w = common::server(&["worker", "--dispatcher", &d, "--port", &port, "--buffer", "8"]);
    let client = Client::new(std::slice::from_ref(&d), RetryPolicy::for_tests()).unwrap();
    common::wait_until("the worker registers", || {
        let client = client.clone();
        async move { client.status().await.map(|s| s.workers.len() == 1).unwrap_or(false) }
    })
    .await;

    let opts = ReadOptions::new(ProcessingMode::Off)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests());
    let mut stream = client.distribute(&DatasetDef::range(N), opts).await.unwrap();
    let mut before = vec![];
    for _ in 0..50 {
        before.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    assert_eq!(before, (0..50).collect::<Vec<_>>());

    tracing::info!("--- SIGKILL the worker mid-job and restart it on the same port");
    w.kill();
    let _w = common::server(&["worker", "--dispatcher", &d, "--port", &port, "--buffer", "8"]);

    let after = collect_i64(stream).await;
    let all = [before, after].concat();
    let c = counts(&all);
    assert_eq!(c.len() as i64, N, "every element arrives");
    assert_eq!(c[&0], 2, "the restarted worker started its task over from the beginning");
    assert_eq!(c[&(N - 1)], 1);
}
