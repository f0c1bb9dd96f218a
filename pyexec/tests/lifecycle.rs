//! No Python process outlives its pool. (Its own test binary: it counts this
//! process's children, which other tests' pools would add to.)

use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use sluice_dataset::{Element, PyCall, PyFunction, PyOp, PythonExecutor, Tensor};
use sluice_pyexec::{Pool, PoolConfig};

/// Pids of this process's children whose command is the pool's interpreter.
fn python_children() -> Vec<u32> {
    children_of(std::process::id())
}

/// Pids of `parent`'s children running the pool's runner (not zombies).
fn children_of(me: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let ppid: u32 = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let zombie = rest.split_whitespace().next() == Some("Z");
        if ppid == me
            && !zombie
            && String::from_utf8_lossy(&cmdline).contains("Sluice's Python runner")
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn dropping_the_pool_ends_its_processes_even_mid_call() {
    let marks = tempfile::tempdir().unwrap();
    let mut c = PoolConfig::new(sluice_testkit::python::interpreter());
    c.processes = 2;
    c.call_timeout = Duration::from_secs(3600);
    c.env = vec![
        ("PYTHONPATH".into(), concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pymods").into()),
        ("SLUICE_TEST_MARKS".into(), marks.path().display().to_string()),
    ];
    let pool = Pool::start(c).unwrap();
    assert_eq!(python_children().len(), 2);
    // One process busy for an hour in an abandoned call (its stage is gone).
    let (reply, _answers) = channel();
    let call = PyCall {
        function: Arc::new(PyFunction::Ref("sluice_test_fns:mark_and_sleep".into())),
        made_with: pool.version().to_string(),
        op: PyOp::Map,
        inputs: vec![Element::single(Tensor::scalar_i64(0))],
        retries: 0,
    };
    pool.submit(call, 0, reply);
    sluice_testkit::wait_blocking("the call to be running", || {
        std::fs::read_dir(marks.path()).unwrap().count() == 1
    });
    drop(pool);
    sluice_testkit::wait_blocking("the pool's processes to end", || python_children().is_empty());
}

/// Whether `pid` is gone (or a zombie: dead, not yet reaped by init).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_worker_killed_without_unwinding_takes_its_busy_processes_with_it() {
    let python = sluice_testkit::python::interpreter();
    let marks = tempfile::tempdir().unwrap();
    let pymods = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pymods");
    let spec = sluice_testkit::Spec::new(
        env!("CARGO_BIN_EXE_pyexec-hold"),
        [python.display().to_string(), pymods.to_string()],
    )
    .envs([("SLUICE_TEST_MARKS".to_string(), marks.path().display().to_string())]);
    let mut holder = sluice_testkit::Child::spawn(&spec).unwrap();
    // Both processes are inside the function (sleeping an hour): a closed stdin
    // would not end them, only the parent-death signal does.
    let busy = || -> Vec<u32> {
        std::fs::read_dir(marks.path())
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect()
    };
    sluice_testkit::wait_blocking("both Python processes to be busy", || busy().len() == 2);
    let pids = busy();
    assert_eq!(children_of(holder.id()).len(), 2, "they are the holder's children");
    holder.kill(); // SIGKILL: no Drop runs in the holder
    sluice_testkit::wait_blocking("the holder's Python processes to die", || {
        pids.iter().all(|p| dead(*p))
    });
}
