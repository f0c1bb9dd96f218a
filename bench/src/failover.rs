//! Leader failover under load: the split loops run against a three-node group, the
//! leader process is SIGKILLed, and the loops' `DispatcherClient`s find the new
//! leader (a lost reply is retried with the same sequence, so it gets the same split).
//!
//! ```text
//!  lanes ──GetSplit──► leader ✕ (SIGKILL at `kill`)      … election …  new leader
//!  answered: ││││││││││││                                            │││││││││
//!                       └── longest gap ─────────────────────────────┘
//! ```
//!
//! Figures: the time from the kill to the first split answered to a request *sent*
//! after the kill (replies the dead leader had already sent can still arrive just
//! after the kill; they are counted apart as "in flight"), and the longest gap between
//! consecutive answered splits in the whole run.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use sluice_client::DispatcherClient;
use sluice_testkit::Quorum;

use crate::driver::{check_runs, drive, lane_policy, ExactlyOnce, Fleet, RunSummary, Shared};
use crate::BenchConfig;

#[derive(Clone, Debug, Serialize)]
pub struct Failover {
    pub killed_node: u64,
    pub new_leader: Option<u64>,
    pub killed_after_s: f64,
    /// From the SIGKILL until a surviving node reported itself leader (polled).
    pub new_leader_after_ms: Option<f64>,
    /// From the SIGKILL to the first split answered to a request sent after it.
    pub first_split_after_kill_ms: Option<f64>,
    /// Splits requested before the kill whose answers arrived after it (sent by the
    /// old leader before it died, or retried on the new one).
    pub in_flight_after_kill: u64,
    /// The longest gap between consecutive answered splits in the whole run.
    pub longest_gap_ms: f64,
    pub splits_after_kill: u64,
    pub run: RunSummary,
    pub retry_policy: String,
    pub exactly_once: ExactlyOnce,
}

/// The loops run this long before the kill…
const BEFORE_KILL: Duration = Duration::from_secs(2);
/// …and this long after the first split answered after it.
const AFTER_RECOVERY: Duration = Duration::from_secs(2);
/// Give up waiting for a split after the kill after this long (the lanes' own retry
/// deadline is 30 s).
const RECOVERY_LIMIT: Duration = Duration::from_secs(40);

pub async fn run(
    group: &mut Quorum,
    fleet: &mut Fleet,
    cfg: &BenchConfig,
) -> anyhow::Result<Failover> {
    let lanes = fleet.new_iteration(cfg.elements, 1).await?;
    let shared = Shared::new(u64::MAX, BEFORE_KILL + RECOVERY_LIMIT + AFTER_RECOVERY);
    let driver = tokio::spawn(drive(lanes, shared.clone()));

    tokio::time::sleep(BEFORE_KILL).await;
    let leader = group.leader().await?;
    tracing::info!(leader, "--- SIGKILL the leader");
    let kill_us = shared.mark();
    group.kill(leader).context("the leader is not running")?;
    // Replies the old leader had sent before dying may still arrive; only an answer
    // to a request sent after the kill shows that a new leader serves.
    let waited = Instant::now();
    let status = DispatcherClient::new(group.addresses(), lane_policy())?;
    // When (µs since `t0`) a surviving node first said it leads.
    let mut new_leader_after = None;
    while (shared.answered_after_mark.load(Ordering::Relaxed) == 0 || new_leader_after.is_none())
        && waited.elapsed() < RECOVERY_LIMIT
        && !driver.is_finished()
    {
        if new_leader_after.is_none() && leads(&status, leader).await {
            new_leader_after = Some(shared.now_us());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shared.stop_in(AFTER_RECOVERY);
    let runs = driver.await.context("the split loops panicked")??;
    let summary = RunSummary::of(&runs, shared.t0.elapsed());
    let new_leader = group.leader().await.ok();

    let mut times: Vec<(u64, u64)> = runs.iter().flat_map(|r| r.times_us.iter().copied()).collect();
    times.sort_unstable_by_key(|(_, done)| *done);
    let first_fresh = times.iter().filter(|(sent, _)| *sent > kill_us).map(|(_, d)| *d).min();
    let longest_gap = times.windows(2).map(|w| w[1].1 - w[0].1).max().unwrap_or(0);
    let ms = |us: u64| us as f64 / 1e3;
    let policy = lane_policy();
    Ok(Failover {
        killed_node: leader,
        new_leader,
        killed_after_s: kill_us as f64 / 1e6,
        new_leader_after_ms: new_leader_after.map(|at| ms(at - kill_us)),
        first_split_after_kill_ms: first_fresh.map(|d| ms(d - kill_us)),
        in_flight_after_kill: times.iter().filter(|(s, d)| *s <= kill_us && *d > kill_us).count()
            as u64,
        longest_gap_ms: ms(longest_gap),
        splits_after_kill: times.iter().filter(|(_, d)| *d > kill_us).count() as u64,
        run: summary,
        retry_policy: format!(
            "backoff {:?} x1.5 up to {:?}, attempt timeout {:?}, deadline {:?} (a worker's default)",
            policy.initial_backoff, policy.max_backoff, policy.attempt_timeout, policy.deadline
        ),
        exactly_once: check_runs(&runs),
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
