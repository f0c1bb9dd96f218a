//! Leader SIGKILL seen from a reader: three `sluice dispatcher` processes on sled,
//! two `sluice worker` processes, and a DYNAMIC reader (this process) of a long
//! `range(N)` with few elements per split. Once the reader has a quarter of the
//! elements (or 1.5 s after the first), the leader is SIGKILLed; the workers keep
//! producing the splits they hold and ask the new leader for more.
//!
//! ```text
//!  arrivals: ││││││││││││ ✕ kill     … election …   ││││││││││││││ end
//!                        └──── longest gap ─────────┘
//! ```
//! Figures: the longest gap between consecutive element arrivals at the reader over
//! the whole read, when a surviving node first reported itself leader (polled every
//! 5 ms), and the exactly-once check: it is a dispatcher-only fault, so every element
//! must arrive exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{Client, DispatcherClient, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;

use crate::group::group_config;
use crate::service::{start_workers, wait_registered};
use crate::streaming::{READ_TIMEOUT, WORKERS};
use crate::BenchConfig;

/// Elements per split of the group: small, so the workers ask for splits often.
pub const ELEMENTS_PER_SPLIT: u64 = 10;
/// Splits each worker asks for per `GetSplit` (the worker's `--splits-per-request`).
pub const WORKER_SPLITS_PER_REQUEST: u32 = 16;
/// Kill after this long from the first element at the latest.
const KILL_AFTER: Duration = Duration::from_millis(1500);

#[derive(Clone, Debug, Serialize)]
pub struct ElementGap {
    pub elements: u64,
    pub elements_per_split: u64,
    pub worker_splits_per_request: u32,
    pub killed_node: u64,
    /// From the first element to the kill, and elements read by then.
    pub killed_after_s: f64,
    pub elements_before_kill: u64,
    /// From the SIGKILL until a surviving node reported itself leader.
    pub new_leader_after_ms: Option<f64>,
    /// Longest gap between consecutive arrivals, and where it began relative to the
    /// kill (negative: before it).
    pub longest_gap_ms: f64,
    pub longest_gap_began_ms: f64,
    /// From the first element to the last.
    pub secs: f64,
    pub elements_per_s: f64,
    pub exactly_once: String,
}

impl ElementGap {
    pub fn ok(&self) -> bool {
        self.exactly_once == "ok"
    }
}

pub async fn run(
    cfg: &BenchConfig,
    dir: &std::path::Path,
    logs: &std::path::Path,
) -> anyhow::Result<ElementGap> {
    let n = cfg.stream.gap_elements;
    let work_dir = dir.join("gap-cluster");
    let work_dir = work_dir.to_str().context("bench dir is not UTF-8")?;
    let config = group_config(cfg, 3, work_dir, &[], ELEMENTS_PER_SPLIT, logs, "gap-");
    let mut group = sluice_testkit::Quorum::start_async(config).await?;
    group.leader().await?;
    let extra = ["--splits-per-request".to_string(), WORKER_SPLITS_PER_REQUEST.to_string()];
    let _workers =
        start_workers(&cfg.sluice_exe, group.addresses(), WORKERS, &extra, logs, "gap").await?;
    let client = Client::new(group.addresses(), RetryPolicy::default())?;
    wait_registered(&client, WORKERS).await?;

    // The reader records arrival times (µs since the first element) and values.
    let received = Arc::new(AtomicU64::new(0));
    let def = DatasetDef::range(i64::try_from(n).context("--gap-elements")?);
    let reader = {
        let received = received.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let mut stream =
                client.distribute(&def, ReadOptions::new(ProcessingMode::Dynamic)).await?;
            let (mut times, mut values) = (Vec::with_capacity(n as usize), vec![]);
            let mut first = None;
            while let Some(e) = stream.next().await {
                let now = Instant::now();
                let t0 = *first.get_or_insert(now);
                times.push((now - t0).as_micros() as u64);
                values.push(e?.as_i64()?);
                received.fetch_add(1, Ordering::Relaxed);
            }
            let first = first.context("the read delivered no element")?;
            anyhow::Ok((first, times, values))
        })
    };
    let deadline = Instant::now() + READ_TIMEOUT;
    // Wait for the first element, then for a quarter of them or KILL_AFTER.
    while received.load(Ordering::Relaxed) == 0 {
        if Instant::now() > deadline || reader.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first_seen = Instant::now();
    while received.load(Ordering::Relaxed) < n / 4 && first_seen.elapsed() < KILL_AFTER {
        if reader.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if reader.is_finished() {
        let r = reader.await?;
        bail!("the read ended before the kill ({:?}); raise --gap-elements", r.map(|r| r.1.len()));
    }
    let leader = group.leader().await?;
    tracing::info!(leader, "--- SIGKILL the leader under a reader");
    let before_kill = received.load(Ordering::Relaxed);
    let killed_at = group.kill(leader).context("the leader is not running")?;
    let status = DispatcherClient::new(group.addresses(), RetryPolicy::default())?;
    let mut new_leader_after = None;
    while new_leader_after.is_none() && Instant::now() < deadline && !reader.is_finished() {
        if leads(&status, leader).await {
            new_leader_after = Some(killed_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let (first, times, values) = tokio::time::timeout(left, reader)
        .await
        .with_context(|| format!("the read did not end within {READ_TIMEOUT:?}"))?
        .context("the reader panicked")??;

    let kill_us = killed_at.saturating_duration_since(first).as_micros() as i64;
    let (gap, began) = times.windows(2).map(|w| (w[1] - w[0], w[0])).max().unwrap_or((0, 0));
    let mut seen = vec![0u8; n as usize];
    let mut outside = 0u64;
    for v in &values {
        match seen.get_mut(*v as usize) {
            Some(c) => *c = c.saturating_add(1),
            None => outside += 1,
        }
    }
    let twice = seen.iter().filter(|c| **c > 1).count();
    let missing = seen.iter().filter(|c| **c == 0).count();
    let exactly_once = if twice == 0 && missing == 0 && outside == 0 {
        "ok".to_string()
    } else {
        format!("VIOLATION: {twice} values twice, {missing} missing, {outside} outside the range")
    };
    let secs = times.last().copied().unwrap_or(0) as f64 / 1e6;
    Ok(ElementGap {
        elements: n,
        elements_per_split: ELEMENTS_PER_SPLIT,
        worker_splits_per_request: WORKER_SPLITS_PER_REQUEST,
        killed_node: leader,
        killed_after_s: kill_us as f64 / 1e6,
        elements_before_kill: before_kill,
        new_leader_after_ms: new_leader_after.map(|d| d.as_secs_f64() * 1e3),
        longest_gap_ms: gap as f64 / 1e3,
        longest_gap_began_ms: (began as i64 - kill_us) as f64 / 1e3,
        secs,
        elements_per_s: values.len() as f64 / secs.max(1e-9),
        exactly_once,
    })
}

/// Whether a node other than `killed` reports itself leader now.
async fn leads(client: &DispatcherClient, killed: u64) -> bool {
    client.status_of_each().await.into_iter().any(|(_, r)| {
        r.ok()
            .and_then(|s| s.raft)
            .is_some_and(|raft| raft.role == "leader" && raft.node_id != killed)
    })
}
