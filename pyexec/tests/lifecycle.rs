//! No Python process outlives its pool. (Its own test binary: it counts this
//! process's children, which other tests' pools would add to.)

use std::time::Duration;

use sluice_pyexec::{Pool, PoolConfig};

/// Pids of this process's children whose command is the pool's interpreter.
fn python_children() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let ppid: u32 = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == me && String::from_utf8_lossy(&cmdline).contains("Sluice's Python runner") {
            out.push(pid);
        }
    }
    out
}

#[test]
fn dropping_the_pool_ends_its_processes() {
    let mut c = PoolConfig::new(sluice_testkit::python::interpreter());
    c.processes = 2;
    c.call_timeout = Duration::from_secs(10);
    let pool = Pool::start(c).unwrap();
    assert_eq!(python_children().len(), 2);
    drop(pool);
    sluice_testkit::wait_blocking("the pool's processes to end", || python_children().is_empty());
}
