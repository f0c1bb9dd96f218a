//! Durability observed from outside: a real dispatcher process journaling to sled, traced
//! with `strace`, must `fdatasync` its journal's `db` file between receiving each command
//! and acknowledging it. sled's own flush is only `sync_file_range` (neither metadata nor the
//! device cache); without the journal's own sync there is no `fdatasync` of `db` at all.
//!
//! Commands are sent one at a time, each awaited, so no two share a group commit: each
//! acknowledgement's window (from just before the request to just after the answer) must
//! hold the start of at least one `fdatasync` of `db`, by strace's wall-clock timestamps
//! (`-ttt`, the same clock as this process's `SystemTime`). Ordering, not durations, is
//! asserted.
//!
//! strace is a Debian package that `scripts/test.sh` installs (`scripts/install-strace.sh`);
//! if it is missing this test fails saying so, it never skips.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{wait_blocking, Port};
use sluice_client::{Client, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_testkit::{Child, Spec, Stderr};

/// Sequential acknowledged commands to check.
const COMMANDS: usize = 8;

fn strace() -> String {
    let exe = std::env::var("SLUICE_STRACE").unwrap_or_else(|_| "strace".to_string());
    let found =
        std::process::Command::new(&exe).arg("-V").output().is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{exe}` was not found: this test observes fsync calls with strace. Install it with \
         `bash scripts/install-strace.sh` (apt-get install strace), or point SLUICE_STRACE at it"
    );
    exe
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Start timestamps of every `fdatasync`/`fsync` of a file named `db` in the trace.
fn db_syncs(trace: &str) -> Vec<f64> {
    trace
        .lines()
        .filter(|l| (l.contains("fdatasync(") || l.contains(" fsync(")) && l.contains("/db>"))
        .map(|l| {
            let ts = l.split_whitespace().nth(1).expect("pid then timestamp");
            ts.parse().unwrap_or_else(|e| panic!("timestamp {ts:?} in {l:?}: {e}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_command_is_preceded_by_an_fdatasync_of_the_journal() {
    common::init_tracing();
    let strace = strace();
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().join("work");
    let port = Port::reserve().unwrap();
    let (address, number) = (port.address(), port.number().to_string());
    let args = ["dispatcher", "--port", &number, "--work-dir", work_dir.to_str().unwrap()];
    let mut dispatcher = common::server(&args);
    let client = Client::new(std::slice::from_ref(&address), RetryPolicy::for_tests()).unwrap();
    // Leader and first entries in place before tracing starts.
    client.register_dataset(&DatasetDef::range(1), None).await.unwrap();

    let log = dir.path().join("strace.log");
    let pid = dispatcher.id().to_string();
    let spec = Spec::new(
        &strace,
        ["-f", "-ttt", "-y", "-e", "trace=fdatasync,fsync,sync_file_range", "-o"]
            .into_iter()
            .map(String::from)
            .chain([log.display().to_string(), "-p".into(), pid]),
    )
    .stderr(Stderr::Tail { echo: false });
    let mut tracer = Child::spawn(&spec).unwrap_or_else(|e| panic!("{e}"));
    wait_blocking("strace attached to the dispatcher", || {
        let tail = tracer.stderr_tail();
        assert!(!tail.contains("Operation not permitted"), "strace cannot attach: {tail}");
        tail.contains("attached")
    });

    let mut windows = Vec::new();
    for i in 0..COMMANDS {
        let before = now();
        let def = DatasetDef::range(100 + i as i64);
        client.register_dataset(&def, Some(&format!("ds-{i}"))).await.unwrap();
        windows.push((before, now()));
    }

    // The dispatcher's death ends the trace; strace then writes out and exits.
    dispatcher.kill();
    wait_blocking("strace to exit after the dispatcher", || tracer.exited());
    let trace = std::fs::read_to_string(&log).unwrap();
    let syncs = db_syncs(&trace);
    assert!(
        trace.contains("sync_file_range("),
        "sled's own flush (sync_file_range) should be in the trace:\n{trace}"
    );
    assert!(
        syncs.len() >= COMMANDS,
        "{} fdatasyncs of db for {COMMANDS} commands:\n{trace}",
        syncs.len()
    );
    for (i, (from, to)) in windows.iter().enumerate() {
        // strace's clock has microseconds; allow for that rounding, no more.
        let slack = Duration::from_micros(2).as_secs_f64();
        assert!(
            syncs.iter().any(|t| *t >= from - slack && *t <= to + slack),
            "command {i} (sent at {from:.6}, acknowledged at {to:.6}) had no fdatasync of the \
             journal's db file in between; syncs at {syncs:?}\n{trace}"
        );
    }
}
