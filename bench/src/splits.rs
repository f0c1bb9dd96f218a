//! Committed get-split rate: one measurement per journal set-up.
//!
//! (a) one node in memory and (b) one node on sled run in this process
//! (`sluice_dispatcher::spawn`); (c) three nodes on sled and (d) three nodes on the
//! moto S3 server run as `sluice dispatcher` processes (a `sluice_testkit::Quorum`, see
//! [`crate::group`]). Each case drives
//! a fresh iteration with [`drive`] until end of splits or the time budget.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use sluice_dataset::FunctionRegistry;
use sluice_dispatcher::DispatcherConfig;
use sluice_testkit::Quorum;
use tokio::net::TcpListener;

use crate::driver::{check_runs, drive, ExactlyOnce, Fleet, RunSummary, Shared};
use crate::group::group_config;
use crate::measure::Latency;
use crate::BenchConfig;

/// One row of the get-split table.
#[derive(Clone, Debug, Serialize)]
pub struct SplitCase {
    pub name: String,
    pub journal: String,
    pub run: RunSummary,
    /// The physical limit this case's commits wait on ("fsync" or "S3 PUT"), if any.
    pub limit: Option<String>,
    /// splits/s × the limit's median latency: splits committed per fsync (or PUT).
    pub splits_per_limit: Option<f64>,
    /// splits/s × the median latency of one journal append of one entry (sled) or
    /// one PUT (S3): about 1 means one append per split, no group commit.
    pub splits_per_append: Option<f64>,
    pub exactly_once: ExactlyOnce,
}

/// One rate measurement on a new iteration of `fleet`'s dispatcher, each lane asking
/// for `max_splits` splits per `GetSplit`.
pub async fn rate(
    fleet: &mut Fleet,
    elements: u64,
    budget: Duration,
    max_splits: u32,
) -> anyhow::Result<(RunSummary, ExactlyOnce)> {
    let lanes = fleet.new_iteration(elements, max_splits).await?;
    let shared = Shared::new(u64::MAX, budget);
    let runs = drive(lanes, shared.clone()).await?;
    let summary = RunSummary::of(&runs, shared.t0.elapsed());
    Ok((summary, check_runs(&runs)))
}

/// Builds a row; `limit`: the name and latency of what each commit waits on;
/// `append`: the latency of one journal append of one entry.
pub fn row(
    name: &str,
    journal: &str,
    (run, exactly_once): (RunSummary, ExactlyOnce),
    limit: Option<(&str, Latency)>,
    append: Option<Latency>,
) -> SplitCase {
    SplitCase {
        name: name.into(),
        journal: journal.into(),
        splits_per_limit: limit.map(|(_, l)| run.splits_per_s * l.median_ms / 1e3),
        splits_per_append: append.map(|l| run.splits_per_s * l.median_ms / 1e3),
        limit: limit.map(|(what, l)| format!("{what} {:.2} ms", l.median_ms)),
        run,
        exactly_once,
    }
}

/// A one-node dispatcher in this process: in memory (`work_dir: None`) or on sled.
pub async fn in_process(
    cfg: &BenchConfig,
    work_dir: Option<&Path>,
) -> anyhow::Result<(RunSummary, ExactlyOnce)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let work_dir = work_dir.map(|p| p.to_string_lossy().into_owned());
    let config = DispatcherConfig {
        elements_per_split: 1,
        snapshot_every: cfg
            .snapshot_every
            .unwrap_or_else(|| DispatcherConfig::default_snapshot_every(work_dir.as_deref())),
        work_dir,
        // The fake workers never heartbeat (see `group::FAKE_WORKER_TIMEOUT_SECS`).
        worker_timeout: Duration::from_secs(86400),
        ..DispatcherConfig::default()
    };
    let handle = sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin())
        .await
        .context("starting the in-process dispatcher")?;
    let addresses = vec![handle.address().to_string()];
    let measured = async {
        let mut fleet = Fleet::register(&addresses, cfg.workers).await?;
        rate(&mut fleet, cfg.elements, cfg.duration, 1).await
    }
    .await;
    match tokio::time::timeout(Duration::from_secs(10), handle.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "in-process dispatcher stopped with an error"),
        Err(_) => tracing::warn!("in-process dispatcher did not stop within 10 s"),
    }
    measured
}

/// Starts a group of `n` processes on `work_dir` and waits for its leader.
pub async fn start_group(
    cfg: &BenchConfig,
    n: usize,
    work_dir: &str,
    envs: &[(String, String)],
    logs: &Path,
) -> anyhow::Result<Quorum> {
    let group = Quorum::start_async(group_config(cfg, n, work_dir, envs, 1, logs, "")).await?;
    let leader = group.leader().await?;
    tracing::info!(leader, nodes = n, work_dir, "group started");
    Ok(group)
}
