//! The gap section's second part: leader kills and restarts as a user's
//! `sluice read` sees them. Three `sluice dispatcher` processes on sled and two
//! `sluice worker` processes with their default flags (one element per split,
//! one split per request and, since issue 33, one request ahead: nearly every
//! element waits on a committed `GetSplit`), and a
//! `sluice read --mode distributed_epoch` *child process* of the endless
//! `range(1000).repeat()`, whose stdout lines are timestamped here as they arrive.
//! Each cycle SIGKILLs the leader, waits for the read to resume, restarts the
//! killed node and watches the read for a while:
//!
//! ```text
//!  lines: ││││││ ✕ kill ······││││││││││ ▲ restart ││││ · ││││││││ ✕ kill …
//!               └ kill stall ┘           └── restart window ──────┘
//!                 (its end: "resumed")      longest gap = restart stall
//! ```
//! Unlike the first part (an in-process reader), this goes through everything a
//! user's read goes through: the `sluice` binary's output path included. Figures:
//! per cycle the kill stall (the longest gap that ends after the kill), when the
//! read resumed, the restart stall (the longest gap in the window after the
//! restart; a gap no longer than the quiet-window one is noise), and the Raft terms
//! (a restart that disturbs the quorum shows as a term change after it).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use sluice_client::{Client, DispatcherClient, RetryPolicy};
use sluice_dataset::DatasetDef;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use crate::group::group_config;
use crate::service::{start_workers, wait_registered};
use crate::streaming::WORKERS;
use crate::BenchConfig;

/// After the read resumed, this long passes before the restart (so the kill
/// stall is over and measured apart from the restart's).
const SETTLE: Duration = Duration::from_secs(1);
/// The window after a restart in which the read is watched for a stall.
const RESTART_WINDOW: Duration = Duration::from_secs(3);
/// Before each kill, the longest gap that ended in this window is the noise floor.
const QUIET_WINDOW: Duration = Duration::from_secs(2);
/// Gaps shorter than this are not recorded (lines arrive every few ms).
const GAP_FLOOR: Duration = Duration::from_millis(5);
/// Bound on waiting for the read to resume after a kill.
const RESUME_LIMIT: Duration = Duration::from_secs(30);

/// One kill and restart.
#[derive(Clone, Debug, Serialize)]
pub struct Cycle {
    pub killed_node: u64,
    /// The longest gap that ended after the kill and began before the restart.
    pub kill_stall_ms: f64,
    /// From the kill to the end of that gap: the first line after the kill.
    pub resumed_after_kill_ms: f64,
    /// From the kill until a surviving node reported itself leader (polled every
    /// 5 ms): the election's share of the stall.
    pub new_leader_after_kill_ms: f64,
    /// The longest gap in the window after the restart (spawn), and where it began.
    pub restart_stall_ms: f64,
    pub restart_stall_began_ms: f64,
    /// The longest gap that ended in the quiet window before the kill.
    pub quiet_gap_ms: f64,
    /// Highest Raft term before the kill, before the restart, and at the end of the
    /// restart window.
    pub terms: [u64; 3],
}

/// Min, median, 90th percentile, max.
#[derive(Clone, Debug, Serialize)]
pub struct Dist {
    pub min: f64,
    pub median: f64,
    pub p90: f64,
    pub max: f64,
}

impl Dist {
    fn of(values: impl Iterator<Item = f64>) -> Dist {
        let mut v: Vec<f64> = values.collect();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied();
        Dist {
            min: at(0.0).unwrap_or(0.0),
            median: at(0.5).unwrap_or(0.0),
            p90: at(0.9).unwrap_or(0.0),
            max: at(1.0).unwrap_or(0.0),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ReadFailover {
    pub cycles: Vec<Cycle>,
    pub kill_stall: Dist,
    pub resumed_after_kill: Dist,
    pub new_leader_after_kill: Dist,
    pub restart_stall: Dist,
    pub quiet_gap: Dist,
    /// Cycles whose term changed between the restart and the end of its window.
    pub restart_elections: usize,
    pub elements: u64,
    pub elements_per_s: f64,
}

impl ReadFailover {
    /// The report's lines (see `report.rs`).
    pub fn render(&self, ms: fn(f64) -> String) -> Vec<String> {
        let dist = |d: &Dist| {
            format!(
                "min {}  median {}  p90 {}  max {}",
                ms(d.min),
                ms(d.median),
                ms(d.p90),
                ms(d.max)
            )
        };
        let each = |f: fn(&Cycle) -> f64| {
            let mut v: Vec<f64> = self.cycles.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v.iter().map(|x| format!("{:.2}", x / 1e3)).collect::<Vec<_>>().join(" ")
        };
        vec![
            format!(
                "  `sluice read` child, {} kill+restart cycles ({} elements, {:.0}/s; workers and \
                 dispatchers at their default split flags)",
                self.cycles.len(),
                self.elements,
                self.elements_per_s
            ),
            format!("  kill stall:      {}", dist(&self.kill_stall)),
            format!("    each (s): {}", each(|c| c.kill_stall_ms)),
            format!("  kill → resumed:  {}", dist(&self.resumed_after_kill)),
            format!("  kill → new leader reported: {}", dist(&self.new_leader_after_kill)),
            format!("  restart stall:   {}", dist(&self.restart_stall)),
            format!("    each (s): {}", each(|c| c.restart_stall_ms)),
            format!(
                "  quiet-window gap (noise floor): {}   elections after a restart: {}",
                dist(&self.quiet_gap),
                self.restart_elections
            ),
        ]
    }
}

/// Arrival gaps of the reader's lines: (last line before, first line after).
struct Arrivals {
    gaps: Vec<(Instant, Instant)>,
    lines: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Arrivals {
    /// The longest gap overlapping `[from, to)`.
    fn longest(&self, from: Instant, to: Instant) -> Option<(Instant, Instant)> {
        self.longest_where(|(a, b)| b > from && a < to)
    }

    /// The longest gap that ended in `[from, to)`.
    fn longest_ending(&self, from: Instant, to: Instant) -> Option<(Instant, Instant)> {
        self.longest_where(|(_, b)| b >= from && b < to)
    }

    fn longest_where(&self, f: impl Fn((Instant, Instant)) -> bool) -> Option<(Instant, Instant)> {
        self.gaps.iter().copied().filter(|g| f(*g)).max_by_key(|(a, b)| *b - *a)
    }
}

pub async fn run(cfg: &BenchConfig, dir: &Path, logs: &Path) -> anyhow::Result<ReadFailover> {
    let kills = cfg.stream.gap_kills;
    let work_dir = dir.join("gap-read-cluster");
    let work_dir = work_dir.to_str().context("bench dir is not UTF-8")?;
    // The dispatcher's default of one element per split.
    let config = group_config(cfg, 3, work_dir, &[], 1, logs, "gapr-");
    let mut group = sluice_testkit::Quorum::start_async(config).await?;
    group.leader().await?;
    let _workers =
        start_workers(&cfg.sluice_exe, group.addresses(), WORKERS, &[], logs, "gapr").await?;
    let client = Client::new(group.addresses(), RetryPolicy::default())?;
    wait_registered(&client, WORKERS).await?;
    let def = DatasetDef::range(1000).repeat_forever();
    let dataset_id = client.register_dataset(&def, None).await?;

    let log = std::fs::File::create(logs.join("gapr-reader.log"))?;
    let mut reader = tokio::process::Command::new(&cfg.sluice_exe)
        .args(["read", "--dispatcher", &group.addresses().join(","), "--dataset-id", &dataset_id])
        .args(["--mode", "distributed_epoch", "--timeout-secs", "10"])
        .env("SLUICE_LOG", std::env::var("SLUICE_CHAOS_CHILD_LOG").unwrap_or("warn".into()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting sluice read")?;
    let stdout = reader.stdout.take().context("the reader's stdout")?;
    // The time of the last line, for the cycles to wait on.
    let (last_tx, mut last_rx) = watch::channel(None::<Instant>);
    let timestamps = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        let mut a = Arrivals { gaps: vec![], lines: 0, first: None, last: None };
        while let Ok(Some(_)) = lines.next_line().await {
            let now = Instant::now();
            if let Some(last) = a.last.filter(|l| now - *l >= GAP_FLOOR) {
                a.gaps.push((last, now));
            }
            a.first.get_or_insert(now);
            a.last = Some(now);
            a.lines += 1;
            last_tx.send_replace(Some(now));
        }
        a
    });

    let status = DispatcherClient::new(group.addresses(), RetryPolicy::default())?;
    let started = Instant::now();
    let mut marks = vec![];
    wait_after(&mut last_rx, started, RESUME_LIMIT).await.context("the read never started")?;
    tokio::time::sleep(SETTLE + QUIET_WINDOW).await;
    for k in 0..kills {
        let leader = group.leader().await?;
        let term_before = max_term(&status).await;
        tracing::info!(cycle = k, leader, "--- SIGKILL the leader under `sluice read`");
        let killed_at = group.kill(leader).context("the leader is not running")?;
        // Lines still arrive from the workers' buffers after the kill: the read has
        // resumed once one arrives after a new leader is known.
        let new_leader_at = new_leader(&status, leader, killed_at + RESUME_LIMIT)
            .await
            .with_context(|| format!("cycle {k}: no new leader after the kill"))?;
        wait_after(&mut last_rx, new_leader_at, RESUME_LIMIT)
            .await
            .with_context(|| format!("cycle {k}: the read did not resume after the kill"))?;
        tokio::time::sleep(SETTLE).await;
        let term_killed = max_term(&status).await;
        let restarted_at = group.start_node_async(leader).await?.spawned_at();
        tokio::time::sleep(RESTART_WINDOW.saturating_sub(restarted_at.elapsed())).await;
        let term_restarted = max_term(&status).await;
        let terms = [term_before, term_killed, term_restarted];
        marks.push((leader, killed_at, new_leader_at, restarted_at, terms));
        // The next kill's quiet window.
        tokio::time::sleep(QUIET_WINDOW).await;
    }
    if reader.try_wait()?.is_some() {
        bail!("`sluice read` exited during the cycles; see its log, gapr-reader.log");
    }
    reader.kill().await?;
    let arrivals = timestamps.await.context("the timestamping task panicked")?;

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let cycles: Vec<Cycle> = marks
        .into_iter()
        .map(|(node, killed_at, new_leader_at, restarted_at, terms)| {
            let stall = arrivals.longest(killed_at, restarted_at);
            let window_end = restarted_at + RESTART_WINDOW;
            let after = arrivals.longest(restarted_at, window_end);
            let quiet_from = killed_at.checked_sub(QUIET_WINDOW).unwrap_or(killed_at);
            let quiet = arrivals.longest_ending(quiet_from, killed_at);
            Cycle {
                killed_node: node,
                kill_stall_ms: stall.map_or(0.0, |(a, b)| ms(b - a)),
                resumed_after_kill_ms: stall.map_or(0.0, |(_, b)| ms(b - killed_at)),
                new_leader_after_kill_ms: ms(new_leader_at - killed_at),
                restart_stall_ms: after.map_or(0.0, |(a, b)| ms(b - a)),
                // Negative: the gap began before the spawn.
                restart_stall_began_ms: after.map_or(0.0, |(a, _)| {
                    ms(a.saturating_duration_since(restarted_at))
                        - ms(restarted_at.saturating_duration_since(a))
                }),
                quiet_gap_ms: quiet.map_or(0.0, |(a, b)| ms(b - a)),
                terms,
            }
        })
        .collect();
    let span = match (arrivals.first, arrivals.last) {
        (Some(a), Some(b)) => b - a,
        _ => Duration::ZERO,
    };
    Ok(ReadFailover {
        kill_stall: Dist::of(cycles.iter().map(|c| c.kill_stall_ms)),
        resumed_after_kill: Dist::of(cycles.iter().map(|c| c.resumed_after_kill_ms)),
        new_leader_after_kill: Dist::of(cycles.iter().map(|c| c.new_leader_after_kill_ms)),
        restart_stall: Dist::of(cycles.iter().map(|c| c.restart_stall_ms)),
        quiet_gap: Dist::of(cycles.iter().map(|c| c.quiet_gap_ms)),
        restart_elections: cycles.iter().filter(|c| c.terms[2] != c.terms[1]).count(),
        elements: arrivals.lines,
        elements_per_s: arrivals.lines as f64 / span.as_secs_f64().max(1e-9),
        cycles,
    })
}

/// Waits (bounded) for a line that arrived after `t`.
async fn wait_after(
    last: &mut watch::Receiver<Option<Instant>>,
    t: Instant,
    limit: Duration,
) -> anyhow::Result<()> {
    let arrived = last.wait_for(|l| l.is_some_and(|l| l > t));
    match tokio::time::timeout(limit, arrived).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => bail!("`sluice read` closed its output"),
        Err(_) => bail!("no element within {limit:?}"),
    }
}

/// When (polled every 5 ms, until `limit`) a node other than `killed` reports
/// itself leader.
async fn new_leader(
    client: &DispatcherClient,
    killed: u64,
    limit: Instant,
) -> anyhow::Result<Instant> {
    while Instant::now() < limit {
        let each = client.status_of_each().await;
        let leads = |raft: &sluice_proto::v1::RaftStatus| raft.role == "leader";
        if each.iter().any(|(_, r)| {
            r.as_ref()
                .ok()
                .and_then(|s| s.raft.as_ref())
                .is_some_and(|r| leads(r) && r.node_id != killed)
        }) {
            return Ok(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("no node other than {killed} reported itself leader")
}

/// The highest Raft term any node reports (0 if none answers).
async fn max_term(client: &DispatcherClient) -> u64 {
    let each = client.status_of_each().await;
    each.into_iter().filter_map(|(_, r)| r.ok()?.raft.map(|r| r.term)).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_distribution_is_read_off_the_sorted_values() {
        let d = Dist::of([5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0, 11.0].into_iter());
        assert_eq!((d.min, d.median, d.p90, d.max), (1.0, 6.0, 10.0, 11.0));
        let empty = Dist::of(std::iter::empty());
        assert_eq!((empty.min, empty.max), (0.0, 0.0));
    }

    #[test]
    fn the_stall_of_a_window_is_its_longest_overlapping_gap() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = Arrivals {
            gaps: vec![(at(0), at(10)), (at(90), at(700)), (at(800), at(850))],
            lines: 0,
            first: None,
            last: None,
        };
        // A gap that began before the window (the kill at 100 ms) still counts.
        assert_eq!(a.longest(at(100), at(2000)), Some((at(90), at(700))));
        assert_eq!(a.longest(at(750), at(2000)), Some((at(800), at(850))));
        assert_eq!(a.longest(at(900), at(2000)), None);
        // The quiet window before the kill counts the gaps that ended in it.
        assert_eq!(a.longest_ending(at(5), at(100)), Some((at(0), at(10))));
    }
}
