//! The bench's groups of `sluice dispatcher` processes: which flags, environment and
//! log files a `sluice_testkit::Quorum` is started with. Starting, logging, reaping
//! and the leader wait are the harness's (each node's stderr goes to
//! `<logs>/<prefix>node-<id>.log`, appended across restarts; every child is killed
//! with the bench; every wait has a deadline).

use std::path::{Path, PathBuf};

use sluice_testkit::{harness_log_env, QuorumConfig};

use crate::BenchConfig;

/// `--worker-timeout-secs` of every dispatcher the bench starts for split loops: longer
/// than any bench run, since the fake workers of [`crate::driver`] do not heartbeat.
pub const FAKE_WORKER_TIMEOUT_SECS: &str = "86400";

/// A group of `n` `sluice dispatcher` processes journaling to `work_dir` (a directory
/// or a URL), with `envs` added to their environment, logs in `logs/`
/// (`<prefix>node-<id>.log`); `cfg.snapshot_every: None` leaves the dispatcher's default.
pub fn group_config(
    cfg: &BenchConfig,
    n: usize,
    work_dir: &str,
    envs: &[(String, String)],
    elements_per_split: u64,
    logs: &Path,
    prefix: &str,
) -> QuorumConfig {
    let mut args: Vec<String> = vec![
        "--elements-per-split".into(),
        elements_per_split.to_string(),
        // The split loops' fake workers never heartbeat: without this the
        // dispatcher declares them lost after its default 10 s and ends their
        // tasks (the restart fill runs for minutes).
        "--worker-timeout-secs".into(),
        FAKE_WORKER_TIMEOUT_SECS.into(),
    ];
    if let Some(every) = cfg.snapshot_every {
        args.extend(["--snapshot-every".to_string(), every.to_string()]);
    }
    QuorumConfig {
        args,
        envs: envs.iter().cloned().chain([harness_log_env()]).collect(),
        log_dir: Some(PathBuf::from(logs)),
        log_prefix: prefix.to_string(),
        ..QuorumConfig::new(&cfg.sluice_exe, n, work_dir)
    }
}
