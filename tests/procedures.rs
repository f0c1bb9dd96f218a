//! The operator's procedures of docs/operations-procedures.md, each run as written
//! against real `sluice` processes while a reader reads a DYNAMIC (distributed_epoch)
//! job: a rolling restart of the quorum, adding and removing a dispatcher, and
//! draining workers for a scale-down. Each checks what the reader saw: no error,
//! every element exactly once (`common::counts`, as the other end-to-end tests).
//!
//! The reader runs in its own task and reads up to a budget the test raises before
//! each step, so it is reading while the step happens, and its epoch cannot end
//! before the last step (the workers buffer a bounded number of elements).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{counts, wait_blocking, wait_until, Port, Proc, Quorum};
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Elements of the dataset: far more than the workers buffer ahead of the reader
/// (256 per task) plus the budgets the steps release.
const N: i64 = 3000;
/// The drain test's: its reader reads on until each drained worker has exited.
const N_DRAIN: i64 = 20_000;
/// Elements the reader reads during each step.
const STEP: usize = 150;

/// A reader of a DYNAMIC job in its own task, reading while its budget allows.
struct Reader {
    n: i64,
    budget: watch::Sender<usize>,
    /// Elements read so far.
    read: Arc<AtomicUsize>,
    task: JoinHandle<Result<Vec<i64>, String>>,
}

impl Reader {
    async fn start(client: &Client, n: i64) -> Reader {
        let id = client.register_dataset(&DatasetDef::range(n), None).await.unwrap();
        let opts = ReadOptions::new(ProcessingMode::Dynamic)
            .job_name("procedure")
            .worker_retry(RetryPolicy::default());
        let mut stream = client.from_dataset_id(&id, opts).await.unwrap();
        let (budget, mut allowed) = watch::channel(STEP);
        let read = Arc::new(AtomicUsize::new(0));
        let count = read.clone();
        let task = tokio::spawn(async move {
            let mut got = vec![];
            loop {
                let n = got.len();
                if allowed.wait_for(|b| n < *b).await.is_err() {
                    return Err("the test dropped the budget".into());
                }
                match stream.next_with_source().await {
                    None => return Ok(got),
                    Some(Ok((_, e))) => {
                        got.push(e.as_i64().unwrap());
                        count.store(got.len(), Ordering::Release);
                    }
                    Some(Err(e)) => return Err(format!("after {n} elements: {e}")),
                }
            }
        });
        Reader { n, budget, read, task }
    }

    /// Lets the reader read `STEP` more elements (while the next step runs).
    fn more(&self) {
        self.budget.send_modify(|b| *b += STEP);
    }

    /// Lets it read to the end; asserts no error and every element exactly once.
    ///
    /// What is bounded is a stall, not the whole read: it fails when no element
    /// arrives for `DEADLINE`. On a machine busy with other work the rest of the
    /// epoch (thousands of one-element splits through a 3-node quorum) can take
    /// longer than any fixed bound while it progresses (issue 31, defect 11: a
    /// bound on the whole remainder failed there, and passed alone).
    async fn finish(self) {
        self.budget.send_replace(usize::MAX);
        let mut task = self.task;
        let (mut seen, mut since) = (self.read.load(Ordering::Acquire), std::time::Instant::now());
        let (from, start) = (seen, since);
        let got = loop {
            match tokio::time::timeout(std::time::Duration::from_millis(200), &mut task).await {
                Ok(joined) => {
                    let got = joined.unwrap().expect("the reader sees no error");
                    let rest = got.len().saturating_sub(from);
                    tracing::info!("the last {rest} elements took {:?}", start.elapsed());
                    break got;
                }
                Err(_) => {
                    let now = self.read.load(Ordering::Acquire);
                    if now != seen {
                        (seen, since) = (now, std::time::Instant::now());
                    }
                    assert!(
                        since.elapsed() < common::DEADLINE,
                        "the read stalled: no element for {:?} after {seen} of {}",
                        common::DEADLINE,
                        self.n
                    );
                }
            }
        };
        let c = counts(&got);
        assert_eq!(c.len() as i64, self.n, "every element arrived");
        assert!(c.values().all(|k| *k == 1), "none twice: {:?}", c.iter().find(|(_, k)| **k > 1));
    }
}

/// `sluice worker` processes on the given dispatcher list, with `extra` flags.
fn workers_with(dispatchers: &str, n: usize, extra: &[&str]) -> Vec<Proc> {
    let mut args =
        vec!["worker", "--dispatcher", dispatchers, "--port", "0", "--timeout-secs", "60"];
    args.extend_from_slice(extra);
    (0..n).map(|_| common::server(&args)).collect()
}

fn workers(dispatchers: &str, n: usize) -> Vec<Proc> {
    workers_with(dispatchers, n, &[])
}

/// The drain tests' dispatcher: splits of 10 elements, and a stopped worker
/// declared lost after 3 s (so a loss would show quickly).
fn drain_dispatcher() -> Proc {
    common::server(&[
        "dispatcher",
        "--port",
        "0",
        "--elements-per-split",
        "10",
        "--worker-timeout-secs",
        "3",
    ])
}

/// Waits until the leader lists `n` workers not declared lost.
async fn wait_workers(client: &Client, n: usize) {
    wait_until(&format!("{n} live workers"), || {
        let c = client.clone();
        async move {
            let live =
                |s: &sluice_client::ServiceStatus| s.workers.iter().filter(|w| !w.lost).count();
            c.status().await.map(|s| s.from_leader && live(&s) == n).unwrap_or(false)
        }
    })
    .await;
}

/// Node `address`'s applied index, asked of it alone.
async fn applied(address: &str) -> Option<u64> {
    let c = Client::new(&[address.to_string()], RetryPolicy::for_tests()).ok()?;
    let (_, r) = c.status_of_each().await.pop()?;
    r.ok()?.raft?.applied_index
}

/// The operator's check between two steps: the node is SERVING (the readiness
/// probe) and has applied at least what the leader had when it was stopped.
async fn wait_ready_and_caught_up(address: &str, leader_applied: u64) {
    wait_until(&format!("{address}: health SERVING"), || common::health_serving(address)).await;
    wait_until(&format!("{address}: applied ≥ {leader_applied}"), || async {
        applied(address).await.is_some_and(|a| a >= leader_applied)
    })
    .await;
}

/// SIGTERM a node, wait for it to exit 0.
fn stop_gracefully(q: &mut Quorum, id: u64) {
    let mut node = q.take(id).expect("the node runs");
    node.terminate().unwrap();
    let mut status = None;
    wait_blocking(&format!("node {id} to exit after SIGTERM"), || {
        status = node.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "node {id} exits 0 on SIGTERM: {status:?}");
}

fn start_quorum(dir: &str) -> Quorum {
    common::init_tracing();
    common::sluice().quorum(3, dir, &["--snapshot-every", "200"], &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_the_quorum_loses_and_repeats_nothing_for_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let mut q = start_quorum(dir.path().to_str().unwrap());
    q.leader().await.unwrap();
    let list = q.addresses().join(",");
    let _workers = workers(&list, 2);
    let client = Client::new(q.addresses(), RetryPolicy::default()).unwrap();
    wait_workers(&client, 2).await;
    let reader = Reader::start(&client, N).await;

    // A StatefulSet's rolling update: the highest ordinal first, each pod only once
    // the one before is ready. The leader is among them, wherever it is.
    for id in [3, 2, 1] {
        let leader = q.leader().await.unwrap();
        let leader_applied = applied(q.address(leader)).await.unwrap_or(0);
        tracing::info!("--- SIGTERM node {id} (leader: {leader}) while the reader reads");
        reader.more();
        tokio::task::block_in_place(|| stop_gracefully(&mut q, id));
        tracing::info!("--- start node {id} again with the same arguments");
        q.start_node_async(id).await.unwrap();
        wait_ready_and_caught_up(q.address(id), leader_applied).await;
    }
    reader.finish().await;
}

/// `sluice admin ARGS`, blocking; (status ok, stdout, stderr).
fn admin(args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["admin"];
    all.extend_from_slice(args);
    tokio::task::block_in_place(|| common::run_sluice(&all, None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_is_added_and_the_leader_removed_while_a_reader_reads() {
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().to_str().unwrap();
    let mut q = start_quorum(work_dir);
    q.leader().await.unwrap();
    // Node 4's ports, reserved now: clients and workers list it from the start.
    let ports = Port::reserve_n(2).unwrap();
    let (a4, r4) = (ports[0].address(), ports[1].address());
    let entry4 = format!("{a4}/{r4}");
    let mut everyone: Vec<String> = q.addresses().to_vec();
    everyone.push(a4.clone());
    let _workers = workers(&everyone.join(","), 2);
    let client = Client::new(&everyone, RetryPolicy::default()).unwrap();
    wait_workers(&client, 2).await;
    let reader = Reader::start(&client, N).await;
    let raft = |id: u64| q.raft_addresses()[id as usize - 1].clone();

    tracing::info!("--- adding node 4 before it runs: refused, nothing changed");
    let (ok, _, err) = admin(&[
        "add-dispatcher",
        "--id",
        "4",
        "--address",
        &entry4,
        "--raft-address",
        &raft(1),
        "--timeout-secs",
        "20",
    ]);
    assert!(!ok && err.contains("does not answer") && err.contains("was not changed"), "{err}");
    let (ok, _, err) =
        admin(&["add-dispatcher", "--id", "2", "--address", &entry4, "--raft-address", &raft(1)]);
    assert!(!ok && err.contains("node 2 is already a voter"), "{err}");

    tracing::info!("--- start node 4 (empty work_dir, the group's entries and its own)");
    let peers =
        format!("{},4={entry4}", sluice_testkit::group_flag(q.addresses(), q.raft_addresses()));
    let _node4 = common::server(&[
        "dispatcher",
        "--node-id",
        "4",
        "--peers",
        &peers,
        "--work-dir",
        work_dir,
        "--snapshot-every",
        "200",
    ]);
    // Not a member yet: it does not serve (no leader known to it).
    assert!(!common::health_serving(&a4).await, "node 4 serves before it was added");

    let leader = q.leader().await.unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    tracing::info!("--- add node 4 through a follower (node {follower}), the reader reading");
    reader.more();
    let (ok, out, err) = admin(&[
        "add-dispatcher",
        "--id",
        "4",
        "--address",
        &entry4,
        "--raft-address",
        &raft(follower),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("4={a4}")), "{out}");
    wait_until("node 4: health SERVING", || common::health_serving(&a4)).await;
    let (ok, _, err) =
        admin(&["add-dispatcher", "--id", "4", "--address", &entry4, "--raft-address", &raft(1)]);
    assert!(!ok && err.contains("node 4 is already a voter"), "{err}");

    let leader = q.leader().await.unwrap();
    tracing::info!("--- remove the leader (node {leader}) through node 4, then stop it");
    reader.more();
    let (ok, out, err) =
        admin(&["remove-dispatcher", "--id", &leader.to_string(), "--raft-address", &r4]);
    assert!(ok, "{err}");
    assert!(
        !out.contains(&format!("{leader}={}", q.address(leader))) && out.contains("4="),
        "{out}"
    );
    q.kill(leader);
    let remaining: Vec<String> =
        everyone.iter().filter(|a| *a != q.address(leader)).cloned().collect();
    let fewer = Client::new(&remaining, RetryPolicy::default()).unwrap();
    let status = common::leader_status(&fewer).await;
    let members = status.raft.clone().unwrap().members;
    assert!(members.contains_key(&4) && !members.contains_key(&leader), "{members:?}");
    let (ok, out, err) = tokio::task::block_in_place(|| {
        common::run_sluice(&["status", "--dispatcher", &remaining.join(",")], None)
    });
    assert!(ok, "{err}");
    assert!(out.contains("members (node") && out.contains(&format!("4={a4}")), "{out}");
    assert!(!out.contains(&format!("{leader}={}", q.address(leader))), "{out}");

    tracing::info!("--- refusals: an unknown node; a removal the majority would not survive");
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (ok, _, err) = admin(&["remove-dispatcher", "--id", "9", "--raft-address", &r4]);
    assert!(!ok && err.contains("node 9 is not a member"), "{err}");
    q.kill(others[1]);
    let (ok, _, err) =
        admin(&["remove-dispatcher", "--id", &others[0].to_string(), "--raft-address", &r4]);
    assert!(!ok && err.contains("needs 2 of the remaining voters"), "{err}");
    q.start_node_async(others[1]).await.unwrap();

    reader.finish().await;
    drop(ports);
}

/// Scale-down, one worker after another (tests/lifecycle.rs drains one of two; this
/// is the procedure's loop): SIGTERM, wait for exit 0, next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_two_of_three_workers_mid_epoch_loses_and_repeats_nothing() {
    common::init_tracing();
    let dispatcher = drain_dispatcher();
    let d = dispatcher.address().to_string();
    // No drain deadline: a drained worker waits for its reader however slow.
    let mut ws = workers_with(&d, 3, &["--drain-timeout-secs", "3600"]);
    let client = Client::new(std::slice::from_ref(&d), RetryPolicy::default()).unwrap();
    wait_workers(&client, 3).await;
    let reader = Reader::start(&client, N_DRAIN).await;

    for i in 0..2 {
        let mut w = ws.remove(0);
        // The reader pauses (a trainer busy between two batches).
        let paused = *reader.budget.borrow();
        wait_until("the reader to pause", || {
            let at = reader.read.load(Ordering::Acquire);
            async move { at >= paused }
        })
        .await;
        tracing::info!("--- SIGTERM worker {} while the reader is paused", w.address());
        w.terminate().unwrap();
        // While the reader is paused the worker ends its DYNAMIC task with the
        // splits it holds, delivers them (into the client's buffers), reports the
        // task finished and exits.
        tokio::task::block_in_place(|| {
            wait_blocking("the drained worker to exit", || w.try_wait().unwrap().is_some())
        });
        let status = w.try_wait().unwrap().unwrap();
        assert!(status.success(), "a drained worker exits 0: {status:?}");
        reader.more();
        // The dispatcher declares it lost once its heartbeats stop for
        // --worker-timeout-secs (it has no tasks left to end by then).
        wait_workers(&client, 2 - i).await;
    }
    reader.finish().await;
}

/// A worker drained while the one reader of its DYNAMIC task streams nothing from
/// it (the reader is stopped, and had not even opened a stream to it) still
/// delivers the splits it holds: it serves the reader's stream when the reader
/// comes back, then exits. Without that, those splits would be lost with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_worker_keeps_its_dynamic_splits_for_a_reader_that_was_not_streaming() {
    common::init_tracing();
    let dispatcher = drain_dispatcher();
    let d = dispatcher.address().to_string();
    // One split per grant, so that worker A, which fills its buffer while the
    // reader is stopped, leaves splits for worker B (grants sized by pace would
    // have given A the whole epoch before its buffer slowed it).
    let one = ["--splits-per-request", "1"];
    let _a = workers_with(&d, 1, &["--drain-timeout-secs", "3600", one[0], one[1]]);
    let spec = r#"{"stages": [{"range": {"stop": 2000}}]}"#;
    let (ok, id, err) = common::sluice().run(&["register", "--dispatcher", &d, "-"], Some(spec));
    assert!(ok, "{err}");
    let read =
        ["read", "--dispatcher", &d, "--dataset-id", id.trim(), "--mode", "distributed_epoch"];
    let mut reader = common::sluice().spawn(&read);
    let stdout = reader.take_stdout().expect("the reader's stdout");
    let lines = Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let collector = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stdout) {
                let v = line.expect("a line").trim().parse().expect("an integer");
                lines.lock().unwrap().push(v);
            }
        })
    };
    wait_until("the reader's first element", || {
        let n = lines.lock().unwrap().len();
        async move { n > 0 }
    })
    .await;
    reader.pause().unwrap();

    // Worker B joins the running iteration while the reader is stopped: its task
    // takes splits and buffers their elements, and no reader streams from it.
    let metrics = Port::reserve().unwrap();
    let metrics_addr = metrics.address();
    drop(metrics);
    let drain = ["--drain-timeout-secs", "3600", "--metrics-addr", &metrics_addr, one[0], one[1]];
    let mut b = workers_with(&d, 1, &drain).remove(0);
    common::scrape::scrape_until(&metrics_addr, "worker B to hold elements", |s| {
        s.iter().any(|x| x.name == "sluice_worker_buffer_elements" && x.value > 0.0)
    })
    .await;
    tracing::info!("--- SIGTERM worker B, then let the reader go on");
    b.terminate().unwrap();
    reader.resume().unwrap();

    tokio::task::block_in_place(|| {
        wait_blocking("the reader to finish", || reader.try_wait().unwrap().is_some());
        wait_blocking("the drained worker to exit", || b.try_wait().unwrap().is_some());
    });
    collector.join().unwrap();
    let status = reader.try_wait().unwrap().unwrap();
    assert!(status.success(), "the reader failed: {}", reader.last_words());
    assert!(b.try_wait().unwrap().unwrap().success(), "a drained worker exits 0");
    let got = lines.lock().unwrap().clone();
    let c = counts(&got);
    assert_eq!(c.len(), 2000, "every element arrived (B's splits too)");
    assert!(c.values().all(|k| *k == 1), "none twice");
}
