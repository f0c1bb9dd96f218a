//! Children that fail to start fail the caller with their stderr, never hang it;
//! dropped children are reaped; children die with their process, not with the
//! thread that asked for them.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use sluice_testkit::{run, wait_blocking, Child, Error, Spec, Stderr};

fn sh(script: &str) -> Spec {
    Spec::new("/bin/sh", ["-c", script])
}

/// Whether `pid` is a live (not zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn a_child_that_exits_at_once_fails_naming_its_stderr() {
    let err = Child::start(&sh("echo boom-on-stderr >&2; exit 3")).err().expect("an error");
    let text = err.to_string();
    assert!(matches!(err, Error::ExitedBeforeListening { .. }), "{text}");
    assert!(text.contains("boom-on-stderr") && text.contains("exit status: 3"), "{text}");
}

#[test]
fn a_child_logging_to_a_file_that_exits_at_once_fails_quoting_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("child.log");
    let spec = sh("echo first >&2; echo last-words >&2; exit 1").stderr(Stderr::File(log.clone()));
    let text = Child::start(&spec).err().expect("an error").to_string();
    assert!(text.contains("last-words") && text.contains(&log.display().to_string()), "{text}");
}

#[test]
fn a_child_that_never_prints_listening_on_fails_at_the_deadline() {
    let spec = sh("echo still-starting >&2; exec sleep 30");
    let err = Child::start_within(&spec, Duration::from_millis(300)).err().expect("an error");
    let text = err.to_string();
    assert!(matches!(err, Error::StartTimeout { .. }), "{text}");
    assert!(text.contains("still-starting") && text.contains("300ms"), "{text}");
}

#[test]
fn a_child_that_prints_something_else_fails_quoting_the_line() {
    let err = Child::start(&sh("echo hello; exec sleep 30")).err().expect("an error");
    assert!(matches!(&err, Error::NotListening { line, .. } if line == "hello\n"), "{err}");
}

#[test]
fn a_server_gives_its_address_and_a_dropped_child_is_reaped() {
    let spec = sh("echo 'listening on 127.0.0.1:9'; exec sleep 30");
    let child = Child::start(&spec).unwrap();
    assert_eq!(child.address(), "127.0.0.1:9");
    assert!(child.listening_after().is_some());
    let pid = child.id();
    assert!(alive(pid));
    drop(child);
    // Killed and reaped: no process, not even a zombie, is left under that pid.
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} is left behind");
}

#[test]
fn a_paused_child_is_still_killed_and_reaped() {
    let mut child = Child::spawn(&sh("exec sleep 30")).unwrap();
    child.pause().unwrap();
    assert!(!child.exited());
    child.kill();
    assert!(child.exited());
    assert!(!alive(child.id()));
}

#[test]
fn run_returns_status_and_output_and_is_killed_past_its_deadline() {
    let out = run(&sh("cat; echo err >&2; exit 4"), Some("in\n"), Duration::from_secs(30)).unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("in\n", "err\n"));

    let slow = sh("echo slow-command >&2; exec sleep 30");
    let err = run(&slow, None, Duration::from_millis(300)).expect_err("an error");
    let text = err.to_string();
    assert!(matches!(err, Error::RunTimeout { .. }), "{text}");
    assert!(text.contains("slow-command"), "{text}");
}

#[test]
fn a_child_outlives_the_thread_that_started_it_but_not_its_process() {
    let spec = Spec::new(env!("CARGO_BIN_EXE_hold-ports"), ["--child"]);
    let mut holder = Child::spawn(&spec).unwrap();
    let mut lines = holder.take_stdout().unwrap().lines();
    let first = lines.next().expect("a line").unwrap();
    let pid: u32 = first.strip_prefix("child ").expect(&first).parse().unwrap();
    assert_eq!(lines.next().expect("a line").unwrap(), "ready");
    assert!(alive(pid), "the grandchild died with the thread that asked for it");

    drop(holder);
    wait_blocking("the grandchild to die with its parent process", || !alive(pid));
}
