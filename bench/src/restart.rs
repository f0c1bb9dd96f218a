//! Restart time of one node on sled with many splits journaled.
//!
//! The W lanes hand out `--restart-splits` splits as fast as they can (count bound,
//! and `--restart-timeout-secs` as a time bound, reported loudly if hit); the node is
//! SIGKILLed and started again on the same work_dir and port. Measured: from the
//! spawn to `listening on`, and to the first split answered (by a client polling
//! every few ms, so its backoff does not blur the figure). That split must begin where
//! the cursor stood (every loop had stopped before the kill, so the cursor equals the
//! count handed out); then each lane takes one more split and the whole history is
//! checked for exactly-once.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use sluice_client::{DispatcherClient, RetryPolicy};

use crate::driver::{drive, ExactlyOnce, Fleet, Lane, RunSummary, Shared};
use crate::splits::start_group;
use crate::BenchConfig;

#[derive(Clone, Debug, Serialize)]
pub struct Restart {
    pub splits_requested: u64,
    pub fill: RunSummary,
    /// False when the fill hit `--restart-timeout-secs` before handing out them all.
    pub fill_complete: bool,
    pub journal_bytes_on_disk: u64,
    pub journal_bytes_apparent: u64,
    pub last_log_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub listening_ms: f64,
    pub first_split_ms: f64,
    pub next_split_begin: u64,
    pub handed_out_before_kill: u64,
    pub exactly_once: ExactlyOnce,
}

const PROGRESS_EVERY: Duration = Duration::from_secs(10);

pub async fn run(cfg: &BenchConfig, dir: &Path, logs: &Path) -> anyhow::Result<Restart> {
    let work_dir = dir.join("restart");
    let work_dir_s = work_dir.to_str().context("bench dir is not UTF-8")?;
    let mut group = start_group(cfg, 1, work_dir_s, &[], logs).await?;
    let mut fleet = Fleet::register(group.addresses(), cfg.workers).await?;
    let lanes = fleet.new_iteration(cfg.restart_splits + cfg.workers as u64 + 1, 1).await?;

    tracing::info!(splits = cfg.restart_splits, "--- hand out splits to journal them");
    let shared = Shared::new(cfg.restart_splits, cfg.restart_timeout);
    let mut driver = tokio::spawn(drive(lanes, shared.clone()));
    let runs = loop {
        tokio::select! {
            r = &mut driver => break r.context("the split loops panicked")??,
            _ = tokio::time::sleep(PROGRESS_EVERY) => {
                let n = shared.answered.load(Ordering::Relaxed);
                let s = shared.t0.elapsed().as_secs_f64();
                tracing::info!("restart fill: {n} of {} splits in {s:.0} s ({:.0}/s)",
                    cfg.restart_splits, n as f64 / s);
            }
        }
    };
    let fill = RunSummary::of(&runs, shared.t0.elapsed());
    let fill_complete = fill.splits == cfg.restart_splits;
    if !fill_complete {
        tracing::warn!(
            "only {} of {} splits handed out within {:?}",
            fill.splits,
            cfg.restart_splits,
            cfg.restart_timeout
        );
    }
    let status =
        DispatcherClient::new(group.addresses(), RetryPolicy::default())?.get_status().await?;
    let raft = status.raft.unwrap_or_default();

    tracing::info!("--- SIGKILL the node and start it again on the same work_dir and port");
    group.kill(1);
    let (journal_bytes_on_disk, journal_bytes_apparent) = disk_usage(&work_dir);
    let node = group.start_node_async(1).await?;
    let (spawned_at, listening_after) =
        (node.spawned_at(), node.listening_after().unwrap_or_default());
    let poller = DispatcherClient::new(
        group.addresses(),
        RetryPolicy {
            initial_backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(5),
            deadline: Duration::from_secs(120),
            attempt_timeout: Duration::from_secs(30),
        },
    )?;
    let mut ranges: Vec<(u64, u64)> = runs.iter().flat_map(|r| r.ranges.clone()).collect();
    let mut lanes: Vec<Lane> = runs.into_iter().map(|r| r.lane).collect();
    let first = poller.get_split(lanes[0].request()).await.context("first split after restart")?;
    let first_split = spawned_at.elapsed();
    lanes[0].next_sequence += 1;
    let split = first.split.unwrap_or_default();
    ranges.push((split.begin, split.end));
    for lane in &mut lanes[1..] {
        let resp = lane.client.get_split(lane.request()).await.context("split after restart")?;
        lane.next_sequence += 1;
        let s = resp.split.unwrap_or_default();
        ranges.push((s.begin, s.end));
    }
    Ok(Restart {
        splits_requested: cfg.restart_splits,
        handed_out_before_kill: fill.splits,
        fill,
        fill_complete,
        journal_bytes_on_disk,
        journal_bytes_apparent,
        last_log_index: raft.last_log_index,
        snapshot_index: raft.snapshot_index,
        listening_ms: listening_after.as_secs_f64() * 1e3,
        first_split_ms: first_split.as_secs_f64() * 1e3,
        next_split_begin: split.begin,
        exactly_once: ExactlyOnce::check(ranges.iter().copied()),
    })
}

/// (allocated bytes, apparent bytes) of every file under `dir`.
fn disk_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut blocks, mut apparent) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => {
                    blocks += m.blocks() * 512;
                    apparent += m.len();
                }
                Err(_) => {}
            }
        }
    }
    (blocks, apparent)
}
