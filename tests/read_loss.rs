//! A read whose data was lost is told so (issue 14): real `sluice` processes on
//! loopback, a worker SIGKILLed in the middle of a `parallel_epochs` read. Its
//! task's undelivered elements are gone; the read must not end like a clean,
//! complete epoch: `sluice read` exits non-zero naming the lost task and worker, or,
//! with `--accept-data-loss`, exits 0 and reports the loss on stderr.

mod common;

use std::io::BufRead;

use common::{run_sluice, wait_blocking};

const ELEMENTS: u64 = 200_000;

struct Outcome {
    success: bool,
    lines: u64,
    stderr: String,
    dead_worker: String,
}

/// Starts a dispatcher (worker timeout 1 s) and two workers, reads
/// `range(ELEMENTS)` in OFF mode (each worker sends all of it), and kills one
/// worker once the reader has printed its first lines. The reader's stdout is not
/// read meanwhile, so the pipe holds the reader, and so the workers, back: the
/// killed worker's task cannot have finished.
fn read_while_a_worker_dies(extra: &[&str]) -> Outcome {
    let dispatcher = common::server(&["dispatcher", "--port", "0", "--worker-timeout-secs", "1"]);
    let d = dispatcher.address().to_string();
    let mut victim = common::server(&["worker", "--dispatcher", &d, "--port", "0"]);
    let _other = common::server(&["worker", "--dispatcher", &d, "--port", "0"]);
    wait_blocking("two workers registered", || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
        ok && out.contains("WORKERS (2)")
    });
    let spec = format!(r#"{{"stages": [{{"range": {{"stop": {ELEMENTS}}}}}]}}"#);
    let (ok, id, err) = run_sluice(&["register", "--dispatcher", &d, "-"], Some(&spec));
    assert!(ok, "{err}");
    let id = id.trim().to_string();
    let mut args =
        vec!["read", "--dispatcher", &d, "--dataset-id", &id, "--mode", "parallel_epochs"];
    args.extend(["--max-outstanding-requests", "1"]);
    args.extend(extra);
    let mut reader = common::sluice().spawn(&args);
    let mut stdout = reader.take_stdout().expect("the reader's stdout");
    let mut line = String::new();
    for _ in 0..100 {
        line.clear();
        assert!(stdout.read_line(&mut line).expect("reads") > 0, "the read ended early");
    }
    tracing::info!("--- kill a worker in the middle of the read");
    let dead_worker = victim.address().to_string();
    victim.kill();
    let mut lines = 100;
    for l in stdout.lines() {
        l.expect("a line");
        lines += 1;
    }
    wait_blocking("the reader exits", || reader.exited());
    let status = reader.try_wait().expect("status").expect("exited");
    Outcome { success: status.success(), lines, stderr: reader.last_words(), dead_worker }
}

#[test]
fn a_read_that_lost_a_workers_elements_fails_naming_the_task_and_worker() {
    let out = read_while_a_worker_dies(&[]);
    assert!(out.lines < 2 * ELEMENTS, "elements were lost: {} lines", out.lines);
    assert!(!out.success, "the read must not end like a complete epoch: {}", out.stderr);
    assert!(
        out.stderr.contains("the read lost data") && out.stderr.contains(&out.dead_worker),
        "names the loss and the worker: {}",
        out.stderr
    );
    assert!(out.stderr.contains("--accept-data-loss"), "says how to accept it: {}", out.stderr);
}

#[test]
fn a_read_that_accepts_loss_ends_with_a_loss_report() {
    let out = read_while_a_worker_dies(&["--accept-data-loss"]);
    assert!(out.lines < 2 * ELEMENTS, "elements were lost: {} lines", out.lines);
    assert!(out.success, "accepted: {}", out.stderr);
    assert!(
        out.stderr.contains("DATA LOST (accepted)") && out.stderr.contains(&out.dead_worker),
        "the summary reports the loss: {}",
        out.stderr
    );
}
