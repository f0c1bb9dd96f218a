//! Leaving cleanly, with real `sluice` processes: SIGTERM drains a worker and stops
//! a dispatcher with exit status 0; `--exit-when-idle`; and commands against an
//! unreachable dispatcher give up with a clear error after their deadline.

mod common;

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use common::{counts, run_sluice, wait_blocking, Port, Proc, DEADLINE};
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;

fn sigterm(p: &Proc) {
    let pid = p.id().to_string();
    let ok = std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(ok.success(), "kill -TERM {pid}");
}

/// Waits (with the fixtures' deadline) until the process has exited.
fn exit_status(p: &mut Proc, what: &str) -> ExitStatus {
    let mut status = None;
    wait_blocking(what, || {
        status = p.try_wait().expect("try_wait");
        status.is_some()
    });
    status.unwrap()
}

fn worker(dispatcher: &str, extra: &[&str]) -> Proc {
    let mut args =
        vec!["worker", "--dispatcher", dispatcher, "--port", "0", "--timeout-secs", "20"];
    args.extend_from_slice(extra);
    common::server(&args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_dynamic_worker_mid_stream_and_the_read_still_gets_every_element_once() {
    common::init_tracing();
    let dispatcher = common::server(&["dispatcher", "--port", "0", "--elements-per-split", "10"]);
    let d = dispatcher.address().to_string();
    let mut leaving = worker(&d, &["--drain-timeout-secs", "20"]);
    let _staying = worker(&d, &[]);
    let client = Client::new(std::slice::from_ref(&d), RetryPolicy::for_tests()).unwrap();
    common::wait_until("two workers", || {
        let client = client.clone();
        async move { client.status().await.map(|s| s.workers.len() == 2).unwrap_or(false) }
    })
    .await;

    let n = 20_000;
    let opts = ReadOptions::new(ProcessingMode::Dynamic).max_outstanding_requests(2);
    let mut stream = client.distribute(&DatasetDef::range(n), opts).await.unwrap();
    let mut got = vec![];
    let mut from_leaving = 0;
    while from_leaving == 0 || got.len() < 200 {
        let (source, e) = stream.next_with_source().await.expect("more").expect("an element");
        from_leaving += usize::from(&*source == leaving.address());
        got.push(e.as_i64().unwrap());
    }

    tracing::info!("--- SIGTERM the worker while its stream is open");
    sigterm(&leaving);
    let rest = tokio::time::timeout(DEADLINE, async {
        let mut rest = vec![];
        while let Some(e) = stream.next().await {
            rest.push(e.expect("no error: the leaving worker drains").as_i64().unwrap());
        }
        rest
    })
    .await
    .expect("the read ends before the deadline");
    got.extend(rest);
    let c = counts(&got);
    assert_eq!(c.len(), n as usize, "every element arrived");
    assert!(c.values().all(|&k| k == 1), "none twice");

    let status = tokio::task::block_in_place(|| exit_status(&mut leaving, "the worker exits"));
    assert!(status.success(), "a drained worker exits 0: {status:?}");
}

#[test]
fn sigterm_stops_a_dispatcher_on_sled_with_status_zero_and_it_restarts_with_all_state() {
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().to_str().unwrap().to_string();
    let port = Port::reserve().unwrap();
    let number = port.number().to_string();
    let start = || common::server(&["dispatcher", "--port", &number, "--work-dir", &work_dir]);
    let mut dispatcher = start();
    let d = dispatcher.address().to_string();
    let spec = r#"{"stages": [{"range": {"stop": 5}}]}"#;
    let (ok, out, err) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(spec));
    assert!(ok, "register: {err}");
    let id = out.trim().to_string();

    tracing::info!("--- SIGTERM: the dispatcher closes its Raft node and journal, exits 0");
    sigterm(&dispatcher);
    let status = exit_status(&mut dispatcher, "the dispatcher exits");
    assert!(status.success(), "exit status 0: {status:?}");

    tracing::info!("--- restarted on the same work_dir: the dataset is there");
    let _dispatcher = start();
    let (ok, out, err) = run_sluice(&["status", "--dispatcher", &d], None);
    assert!(ok, "status: {err}");
    assert!(out.contains(&id), "dataset {id} survived: {out}");
    let _worker = worker(&d, &[]);
    let args = ["read", "--dispatcher", &d, "--dataset-id", &id, "--timeout-secs", "10"];
    let (ok, out, err) = run_sluice(&args, None);
    assert!(ok, "the dataset is readable after the restart: {err}");
    assert_eq!(out.lines().count(), 5);
}

#[test]
fn a_worker_told_to_exit_when_idle_exits_zero_after_its_job_ends() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    let mut w = worker(&d, &["--exit-when-idle", "--idle-grace-secs", "1"]);
    wait_blocking("the worker registered", || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
        ok && out.contains(w.address())
    });
    assert!(w.try_wait().unwrap().is_none(), "no task ran yet: it keeps serving");

    let spec = r#"{"stages": [{"range": {"stop": 50}}]}"#;
    let (ok, out, err) = run_sluice(&["read", "--dispatcher", &d, "--spec", "-"], Some(spec));
    assert!(ok, "read: {err}");
    assert_eq!(out.lines().count(), 50);

    let status = exit_status(&mut w, "the idle worker exits");
    assert!(status.success(), "exit status 0: {status:?}");
}

#[test]
fn a_worker_whose_dispatcher_is_gone_still_stops_promptly_on_sigterm() {
    // Reserved and never bound: nothing listens there.
    let unbound = Port::reserve().unwrap();
    let dead = unbound.address();
    // Registration would retry for 10 minutes; SIGTERM must not wait for that.
    let mut w =
        common::server(&["worker", "--dispatcher", &dead, "--port", "0", "--timeout-secs", "600"]);
    sigterm(&w);
    let status = exit_status(&mut w, "the worker exits");
    assert!(status.success(), "exit status 0: {status:?}");
}

#[test]
fn read_register_and_status_against_a_dead_dispatcher_fail_clearly_after_their_deadline() {
    // Reserved and never bound: nothing listens there.
    let unbound = Port::reserve().unwrap();
    let dead = unbound.address();
    let spec = r#"{"stages": [{"range": {"stop": 5}}]}"#;
    for (args, stdin) in [
        (vec!["read", "--dispatcher", &dead, "--dataset-id", "1000", "--timeout-secs", "2"], None),
        (vec!["register", "--dispatcher", &dead, "--timeout-secs", "2", "-"], Some(spec)),
        (vec!["status", "--dispatcher", &dead, "--timeout-secs", "2"], None),
    ] {
        let started = Instant::now();
        let (ok, _, err) = run_sluice(&args, stdin);
        assert!(!ok, "{args:?} must fail");
        assert!(err.contains(&dead), "{args:?} names the dispatcher: {err}");
        assert!(
            err.to_lowercase().contains("unavailable") || err.contains("no dispatcher answered"),
            "{args:?} says why: {err}"
        );
        // Not a timing assertion on speed: `run_sluice` itself fails past DEADLINE;
        // this records that the deadline given was the one obeyed.
        assert!(started.elapsed() < DEADLINE - Duration::from_secs(5), "{args:?}");
    }
}
