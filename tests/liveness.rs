//! Liveness and garbage collection over real processes: SIGKILLed and paused
//! workers, vanished consumers, abandoned iterations, a restarted dispatcher,
//! and a reader that rejoins its named DYNAMIC job mid-epoch.
//!
//! Short timeouts come from the dispatcher's flags; every wait is on a condition
//! with a deadline (`common::wait_until`).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{ChildStdout, Command};
use std::time::Duration;

use common::{collect_i64, counts, run_sluice, wait_until, Port, Proc};
use futures::StreamExt;
use sluice_client::status::{IterationStatus, WorkerStatus};
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy, ServiceStatus};
use sluice_dataset::DatasetDef;

fn dispatcher(extra: &[&str]) -> Proc {
    let mut args = vec!["dispatcher", "--port", "0"];
    args.extend_from_slice(extra);
    common::server(&args)
}

fn worker(dispatcher: &str, buffer: &str) -> Proc {
    worker_with(dispatcher, buffer, &[])
}

fn worker_with(dispatcher: &str, buffer: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["worker", "--dispatcher", dispatcher, "--port", "0", "--buffer", buffer];
    args.extend_from_slice(&["--timeout-secs", "20"]);
    args.extend_from_slice(extra);
    common::server(&args)
}

fn client(d: &str) -> Client {
    Client::new(&[d.to_string()], RetryPolicy::for_tests()).unwrap()
}

async fn status(c: &Client) -> ServiceStatus {
    c.status().await.expect("status")
}

async fn wait_status(c: &Client, what: &str, cond: impl Fn(&ServiceStatus) -> bool) {
    let cond = &cond;
    wait_until(what, || async move { c.status().await.map(|s| cond(&s)).unwrap_or(false) }).await;
}

fn worker_status<'a>(s: &'a ServiceStatus, address: &str) -> &'a WorkerStatus {
    s.workers.iter().find(|w| w.address == address).expect("the worker is registered")
}

fn iterations(s: &ServiceStatus) -> Vec<&IterationStatus> {
    s.jobs.iter().flat_map(|j| j.iterations.iter()).collect()
}

/// Pipeline threads (`sluice-task-<id>`) alive in a worker process.
fn task_threads(pid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    dir.filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.starts_with("sluice-task"))
        })
        .count()
}

/// `sluice ARGS` with stdout piped, killed on drop, and its stdout lines.
fn spawn_reader(args: &[&str]) -> (Proc, std::io::Lines<BufReader<ChildStdout>>) {
    let mut child = common::sluice().spawn(args);
    let out = child.take_stdout().expect("stdout").lines();
    (child, out)
}

fn signal(p: &Proc, sig: &str) {
    let ok = Command::new("kill").args([sig, &p.id().to_string()]).status().unwrap();
    assert!(ok.success(), "kill {sig}");
}

/// Reads DYNAMIC range(n) with two worker processes; SIGKILLs one mid-epoch.
/// The stream (which accepted loss) reports one lost task, on `worker`.
fn assert_lost(stream: &sluice_client::ElementStream, worker: &str) {
    let report = stream.loss_report().expect("the loss is reported");
    assert_eq!(report.tasks.len(), 1, "{report}");
    assert_eq!(report.tasks[0].worker_address, worker, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_worker_in_dynamic_mode_is_lost_the_epoch_ends_once_and_the_loss_is_reported() {
    const N: i64 = 5000;
    const BUFFER: usize = 4;
    const SPLIT: u64 = 10;
    let d = dispatcher(&["--worker-timeout-secs", "2", "--elements-per-split", "10"]);
    let d = d.address().to_string();
    // One split per grant, so that what the report names is one split.
    let one = ["--splits-per-request", "1"];
    let mut w1 = worker_with(&d, &BUFFER.to_string(), &one);
    let _w2 = worker_with(&d, &BUFFER.to_string(), &one);
    let c = client(&d);
    wait_status(&c, "two workers", |s| s.workers.len() == 2).await;

    // This reader accepts loss: the read ends, with a loss report (a reader that
    // does not fails with DataLost: `read_loss.rs`).
    let mut opts = ReadOptions::new(ProcessingMode::Dynamic)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests())
        .accept_data_loss(true);
    opts.max_elements_per_message = 8;
    let mut stream = c.distribute(&DatasetDef::range(N), opts).await.unwrap();
    let mut got = vec![];
    for _ in 0..200 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }

    tracing::info!("--- SIGKILL one worker mid-epoch; the read must still end");
    let dead = w1.address().to_string();
    w1.kill();
    got.extend(common::rest_i64(&mut stream).await);
    assert_lost(&stream, &dead);

    let c_got = counts(&got);
    assert!(c_got.values().all(|&n| n == 1), "no element twice");
    let s = status(&c).await;
    assert!(worker_status(&s, &dead).lost, "the killed worker is reported lost");
    let it = iterations(&s)[0];
    assert!(it.finished, "the iteration ended");
    assert_eq!(it.lost_tasks, 1);
    let missing = N as u64 - c_got.len() as u64;
    // What was lost: the last range granted to the dead task (reported), the
    // range it was reading when it asked for that one ahead, the elements of
    // earlier ranges still in its buffer, and what was in flight.
    let in_flight = SPLIT + BUFFER as u64 + 2 * 8;
    assert!(it.lost_splits <= 1 && it.lost_elements <= SPLIT, "{it:?}");
    assert!(
        missing <= it.lost_elements + in_flight,
        "{missing} missing, {} reported lost, {in_flight} buffered or in flight",
        it.lost_elements
    );
    eprintln!(
        "dynamic worker kill: {missing} of {N} missing, {} split(s) / {} element(s) reported lost",
        it.lost_splits, it.lost_elements
    );
    let (ok, out, err) = run_sluice(&["status", "--dispatcher", &d], None);
    assert!(ok, "{err}");
    assert!(out.contains("LOST") && out.contains("ended with a lost worker"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_between_jobs_takes_no_part_in_later_jobs_which_read_everything() {
    // Issue 31, defect 1: a worker lost between jobs got a task in every new
    // iteration, which nothing ended; every later read failed on it.
    let d = dispatcher(&["--worker-timeout-secs", "2"]);
    let d = d.address().to_string();
    let mut w1 = worker(&d, "4");
    let _w2 = worker(&d, "4");
    let c = client(&d);
    wait_status(&c, "two workers", |s| s.workers.len() == 2).await;
    let read = |mode| {
        let c = &c;
        async move {
            let opts = ReadOptions::new(mode).worker_retry(RetryPolicy::for_tests());
            let stream = c.distribute(&DatasetDef::range(10), opts).await.unwrap();
            collect_i64(stream).await
        }
    };
    assert_eq!(counts(&read(ProcessingMode::Dynamic).await).len(), 10);

    let dead = w1.address().to_string();
    w1.kill();
    wait_status(&c, "the killed worker is lost", |s| {
        s.workers.iter().any(|w| w.address == dead && w.lost)
    })
    .await;
    for mode in [ProcessingMode::Dynamic, ProcessingMode::Off] {
        let mut got = read(mode).await;
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>(), "{mode:?}: every element, once");
    }
    let s = status(&c).await;
    for it in iterations(&s).iter().skip(1) {
        assert_eq!(it.lost_tasks, 0, "no later iteration had a task on the dead worker");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_worker_in_off_mode_is_lost_and_the_epoch_ends_with_its_copy_incomplete() {
    const N: i64 = 20_000;
    let d = dispatcher(&["--worker-timeout-secs", "2"]);
    let d = d.address().to_string();
    let mut w1 = worker(&d, "4");
    let _w2 = worker(&d, "4");
    let c = client(&d);
    wait_status(&c, "two workers", |s| s.workers.len() == 2).await;

    let opts = ReadOptions::new(ProcessingMode::Off)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests())
        .accept_data_loss(true);
    let mut stream = c.distribute(&DatasetDef::range(N), opts).await.unwrap();
    let mut got = vec![];
    for _ in 0..100 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    tracing::info!("--- SIGKILL one worker mid-copy");
    let dead = w1.address().to_string();
    w1.kill();
    got.extend(common::rest_i64(&mut stream).await);
    assert_lost(&stream, &dead);

    let c_got = counts(&got);
    assert_eq!(c_got.len() as i64, N, "the surviving worker's copy is complete");
    assert!(got.len() < 2 * N as usize, "the lost worker's copy is not");
    let s = status(&c).await;
    let it = iterations(&s)[0];
    assert!(it.finished && it.lost_tasks == 1 && it.lost_splits == 0, "{it:?}");
    let (ok, out, err) = run_sluice(&["status", "--dispatcher", &d], None);
    assert!(ok, "{err}");
    assert!(out.contains("copies are incomplete"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abandoned_iteration_is_collected_its_task_stops_and_it_stays_collected_after_a_restart()
{
    let work_dir = tempfile::tempdir().unwrap();
    let wd = work_dir.path().to_str().unwrap().to_string();
    let reserved = Port::reserve().unwrap();
    let port = reserved.number().to_string();
    let flags = |port: &str| -> Vec<String> {
        [
            "dispatcher",
            "--port",
            port,
            "--work-dir",
            &wd,
            "--client-timeout-secs",
            "1",
            "--job-gc-timeout-secs",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let args = flags(&port);
    let mut dp = common::server(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let d = dp.address().to_string();
    let w = worker(&d, "4");
    let wpid = w.id();
    let c = client(&d);
    wait_status(&c, "the worker", |s| s.workers.len() == 1).await;
    let spec = r#"{"stages": [{"range": {"stop": 1000000000}}]}"#;
    let (ok, id, err) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(spec));
    assert!(ok, "{err}");
    let id = id.trim().to_string();

    tracing::info!("--- a consumer reads a little of an endless OFF job, then vanishes");
    let read = ["read", "--dispatcher", &d, "--dataset-id", &id, "--mode", "off"];
    let (mut reader, mut lines) = spawn_reader(&read);
    for _ in 0..10 {
        lines.next().expect("a line").expect("readable");
    }
    assert_eq!(task_threads(wpid), 1, "the worker runs the task's pipeline");
    reader.kill();

    tracing::info!("--- the client timeout releases it; GC collects the iteration");
    wait_status(&c, "the consumer released and the iteration collected", |s| {
        iterations(s).first().is_some_and(|it| it.clients == 0 && it.garbage_collected)
    })
    .await;
    wait_status(&c, "the worker's task removed", |s| s.workers[0].active_tasks == 0).await;
    wait_until("the worker's pipeline thread stops", || async { task_threads(wpid) == 0 }).await;
    let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
    assert!(ok && out.contains("collected"), "{out}");

    tracing::info!("--- restart the dispatcher on its work_dir: nothing resurrects");
    dp.kill();
    let _dp = common::server(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let wa = w.address().to_string();
    wait_status(&c, "the worker heartbeats the restarted dispatcher", |s| {
        s.workers.iter().any(|x| x.address == wa && x.last_heartbeat_ms_ago.is_some())
    })
    .await;
    let s = status(&c).await;
    let it = iterations(&s)[0];
    assert!(it.garbage_collected && !it.finished, "{it:?}");
    assert_eq!(s.workers[0].active_tasks, 0);
    assert_eq!(task_threads(wpid), 0, "the worker was not handed the task again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_dynamic_reader_rejoins_its_named_job_and_continues_from_the_cursor() {
    const N: usize = 30_000;
    const FIRST: usize = 2_000;
    let d = dispatcher(&["--client-timeout-secs", "1", "--elements-per-split", "10"]);
    let d = d.address().to_string();
    let _w = worker(&d, "8");
    let c = client(&d);
    wait_status(&c, "the worker", |s| s.workers.len() == 1).await;
    let spec = format!(r#"{{"stages": [{{"range": {{"stop": {N}}}}}]}}"#);
    let (ok, id, err) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(&spec));
    assert!(ok, "{err}");
    let id = id.trim().to_string();
    let read = [
        "read",
        "--dispatcher",
        &d,
        "--dataset-id",
        &id,
        "--mode",
        "dynamic",
        "--job-name",
        "trainer",
        "--max-outstanding-requests",
        "1",
    ];

    tracing::info!("--- the first trainer reads part of the epoch and is SIGKILLed");
    let (mut first_proc, mut lines) = spawn_reader(&read);
    let first: Vec<i64> =
        (0..FIRST).map(|_| lines.next().unwrap().unwrap().parse().unwrap()).collect();
    first_proc.kill();
    // Drain what it printed before it died.
    let first: Vec<i64> =
        first.into_iter().chain(lines.map_while(Result::ok).map(|l| l.parse().unwrap())).collect();

    tracing::info!("--- a second trainer with the same job name continues the epoch");
    // A deadline scaled to the work: ~2,800 committed splits and ~28,000 printed
    // elements, which took longer than the default 30 s on a loaded machine.
    let within = common::DEADLINE + Duration::from_millis(3 * N as u64);
    let (ok, out, err) = common::sluice().run_within(&read, None, within);
    assert!(ok, "{err}");
    let second: Vec<i64> = out.lines().map(|l| l.parse().unwrap()).collect();

    let all = counts(&[first.clone(), second.clone()].concat());
    assert!(all.values().all(|&n| n == 1), "no element twice across the two reads");
    assert!(!second.contains(&0), "the second read did not start the epoch over");
    // One worker, one split at a time: the epoch is read in order, so the loss is
    // the contiguous gap between what the first trainer printed and the second
    // one's first element: what the killed process had taken from the worker and
    // not yet printed (its stdout buffer, its element channel and the stream's
    // HTTP/2 window).
    let lost = N - all.len();
    let max_first = *first.iter().max().unwrap();
    assert_eq!(second[0], max_first + 1 + lost as i64, "the gap is contiguous");
    assert!(lost <= 8_000, "{lost} elements lost with the killed reader");
    eprintln!(
        "resume: first read printed {}, second read {}, lost {lost} of {N}",
        first.len(),
        second.len()
    );
    wait_status(&c, "the dead trainer's client released", |s| {
        iterations(s).first().is_some_and(|it| it.clients == 0 && it.finished)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_paused_past_the_timeout_is_lost_and_registers_again_when_it_resumes() {
    let d = dispatcher(&["--worker-timeout-secs", "1"]);
    let d = d.address().to_string();
    let w = worker(&d, "4");
    let c = client(&d);
    wait_status(&c, "the worker", |s| s.workers.len() == 1).await;

    tracing::info!("--- SIGSTOP the worker past its timeout");
    signal(&w, "-STOP");
    wait_status(&c, "the worker declared lost", |s| s.workers[0].lost).await;

    tracing::info!("--- SIGCONT: its heartbeat gets NotFound, and it registers again");
    signal(&w, "-CONT");
    wait_status(&c, "the worker registered again", |s| !s.workers[0].lost).await;
    let opts = ReadOptions::new(ProcessingMode::Off).worker_retry(RetryPolicy::for_tests());
    let stream = c.distribute(&DatasetDef::range(50), opts).await.unwrap();
    assert_eq!(collect_i64(stream).await, (0..50).collect::<Vec<_>>());
}

/// Three dispatcher processes; the leader is SIGKILLed while a worker serves a
/// DYNAMIC read. The worker's heartbeats go unanswered during the election; the
/// new leader starts its timers afresh, so it declares nobody lost, and every
/// element arrives exactly once. The worker timeout (6 s) is longer than the
/// silences a loaded machine puts between two heartbeats of a healthy worker (2 s
/// was not: the worker was declared lost before any kill); a new leader that
/// counted a worker it has not heard from yet as lost fails the test whatever the
/// timeout (`liveness.rs` unit tests pin the timer rules themselves).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_does_not_declare_workers_lost_because_of_the_failover() {
    const N: i64 = 3000;
    let work_dir = tempfile::tempdir().unwrap();
    let wd = work_dir.path().to_str().unwrap().to_string();
    let flags = ["--worker-timeout-secs", "6", "--elements-per-split", "10"];
    let mut q = common::sluice().quorum(3, &wd, &flags, &[]);
    let addresses = q.addresses().to_vec();
    let all = addresses.join(",");
    let _w = worker(&all, "4");
    let c = Client::new(&addresses, RetryPolicy::for_tests()).unwrap();
    let s = common::leader_status(&c).await;
    let leader = s.raft.as_ref().unwrap().node_id;
    wait_until("the worker registers", || async {
        common::leader_status(&c).await.workers.len() == 1
    })
    .await;

    let opts = ReadOptions::new(ProcessingMode::Dynamic)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests());
    let mut stream = c.distribute(&DatasetDef::range(N), opts).await.unwrap();
    let mut got = vec![];
    for _ in 0..100 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    tracing::info!("--- SIGKILL the leader mid-epoch");
    q.kill(leader);
    got.extend(collect_i64(stream).await);
    assert_eq!(got.len() as i64, N, "every element once: no task was ended as lost");
    assert_eq!(counts(&got).len() as i64, N);
    let s = common::leader_status(&c).await;
    assert_ne!(s.raft.as_ref().unwrap().node_id, leader);
    assert!(s.workers.iter().all(|w| !w.lost), "{:?}", s.workers);
    assert!(iterations(&s).iter().all(|it| it.lost_tasks == 0 && it.lost_splits == 0));
}
