//! One size of the scale section: start the quorum, register the workers, let the
//! consumers join, measure the steady window, stop everything (every child is the
//! testkit's: killed and reaped on drop; every wait here has a deadline).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_client::{DispatcherClient, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;
use sluice_testkit::{harness_log_env, Quorum, QuorumConfig};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::consumer::{self, ConsumerParams};
use super::ops::{Event, OpFigures, Ops};
use super::snapshots;
use super::types::{ScaleCase, ScaleConfig, CHANNELS};
use super::worker::{self, SimWorker, WorkerParams};
use crate::procstat::{cpu_time, rss_bytes};

/// A worker's default heartbeat interval (`WorkerConfig::default`).
pub const WORKER_HEARTBEAT: Duration = Duration::from_millis(500);
/// A reader's defaults (`ReadOptions::new`).
pub const CONSUMER: ConsumerParams = ConsumerParams {
    heartbeat_interval: Duration::from_millis(100),
    long_poll: Duration::from_secs(1),
};
/// Quiet time before a resident-memory or CPU reading.
const SETTLE: Duration = Duration::from_secs(1);
/// An operation slower than this at p99 is where the size broke.
const BROKEN_P99_MS: f64 = 1000.0;
/// The target for a grant's p99.
pub const GRANT_P99_TARGET_MS: f64 = 20.0;

pub async fn run_size(
    exe: &Path,
    cfg: &ScaleConfig,
    size: usize,
    work_dir: &Path,
    logs: &Path,
) -> anyhow::Result<ScaleCase> {
    std::fs::create_dir_all(work_dir)?;
    let config = QuorumConfig {
        args: vec!["--snapshot-every".into(), cfg.snapshot_every.to_string()],
        envs: vec![harness_log_env()],
        log_dir: Some(logs.to_path_buf()),
        log_prefix: format!("scale-{size}-"),
        ..QuorumConfig::new(exe, 3, work_dir.to_str().context("work dir is not UTF-8")?)
    };
    let mut group = Quorum::start_async(config).await?;
    let (leader, pids) = leader_first(&group).await?;
    let addresses: Vec<String> = std::iter::once(leader)
        .chain((1..=3).filter(|i| *i != leader))
        .map(|id| group.address(id).to_string())
        .collect();
    let log_starts: Vec<(u64, u64)> =
        (1..=3).map(|id| (id, group.log(id).map_or(0, snapshots::log_len))).collect();

    let policy = RetryPolicy::default().with_deadline(Duration::from_secs(30));
    let channels = || -> anyhow::Result<Vec<DispatcherClient>> {
        (0..CHANNELS).map(|_| Ok(DispatcherClient::new(&addresses, policy.clone())?)).collect()
    };
    let (worker_channels, consumer_channels) = (channels()?, channels()?);
    let ops = Arc::new(Ops::default());
    let (stop, stopped) = watch::channel(false);
    let mut fleet = JoinSet::new();
    tokio::time::sleep(SETTLE).await;
    let rss0 = rss_bytes(&pids[0])?;

    tracing::info!(size, "registering the workers");
    let t0 = Instant::now();
    let params =
        WorkerParams { heartbeat_interval: WORKER_HEARTBEAT, split_interval: cfg.split_interval };
    let run_id = u64::from(std::process::id()) << 16 ^ size as u64;
    let (registered, mut registrations) = mpsc::channel(size);
    for i in 0..size {
        let w = Arc::new(SimWorker::new(worker_channels[i % CHANNELS].clone(), i, run_id));
        let (ops, stopped, registered) = (ops.clone(), stopped.clone(), registered.clone());
        fleet.spawn(async move {
            let ok = w.register(&ops).await;
            let _ = registered.send(ok).await;
            worker::run(w, ops, params, stopped).await;
        });
    }
    let within = cfg.setup_timeout;
    all_ok(&mut registrations, size, within, ("registration", "workers registered"), &ops).await?;
    let register_s = t0.elapsed().as_secs_f64();

    tracing::info!(size, "phase A: workers only");
    tokio::time::sleep(SETTLE).await;
    // The leader now (an election may have moved it): its process is measured.
    let (leader_a, pids) = leader_first(&group).await?;
    let rss1 = rss_bytes(&pids[0])?;
    let phase_a = (cfg.duration / 3).max(Duration::from_secs(1));
    let cpu_a = cpu_over(&pids, phase_a).await?;

    tracing::info!(size, "the consumers join");
    let t0 = Instant::now();
    let jobs = size.div_ceil(cfg.consumers_per_job);
    let def = pb::DatasetDef::from(&DatasetDef::range(i64::MAX));
    let (joined, mut joins) = mpsc::channel(size);
    for i in 0..size {
        let client = consumer_channels[i % CHANNELS].clone();
        let (ops, stopped, joined, def) =
            (ops.clone(), stopped.clone(), joined.clone(), def.clone());
        let job_name = format!("scale-{}", i / cfg.consumers_per_job);
        fleet.spawn(async move {
            match consumer::join(&client, &ops, &def, "scale", &job_name).await {
                // Joined once its first heartbeat is answered (`heartbeat_loop`).
                Some(id) => {
                    consumer::heartbeat_loop(&client, &ops, id, CONSUMER, stopped, joined).await
                }
                None => {
                    let _ = joined.send(false).await;
                }
            }
        });
    }
    all_ok(&mut joins, size, cfg.setup_timeout, ("joining", "consumers joined"), &ops).await?;
    let tasks = (jobs * size) as u64;
    let deadline = Instant::now() + cfg.setup_timeout;
    loop {
        let started = ops.events(Event::TasksStarted);
        if started >= tasks {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "broke at task hand-out: workers started {started} of {tasks} tasks within {:?}",
            cfg.setup_timeout
        );
        // Bench pacing of a progress check, not a synchronisation.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let join_s = t0.elapsed().as_secs_f64();
    let setup_ops = ops.figures().0;
    ops.reset();

    tracing::info!(size, jobs, tasks, "phase B: steady");
    tokio::time::sleep(SETTLE).await;
    let (leader_b, pids) = leader_first(&group).await?;
    if leader_b != leader_a {
        tracing::warn!(leader_a, leader_b, "the leader changed between the two phases");
    }
    let rss2 = rss_bytes(&pids[0])?;
    let raft = |s: &pb::GetStatusResponse| s.raft.clone().unwrap_or_default();
    let before = raft(&worker_channels[0].get_status().await.context("GetStatus")?);
    ops.reset();
    let mut with_self = pids.clone();
    with_self.push("self".into());
    let mut cpu_b = cpu_over(&with_self, cfg.duration).await?;
    let simulator_ms_per_s = cpu_b.pop().unwrap_or(0.0);
    let (steady_ops, events) = ops.figures();
    let status = worker_channels[0].get_status().await.context("GetStatus")?;
    let workers_lost = status.workers.iter().filter(|w| w.lost).count();
    let after = raft(&status);

    let _ = stop.send(true);
    let drained = tokio::time::timeout(Duration::from_secs(15), async {
        while fleet.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        tracing::warn!("simulated fleet did not stop within 15 s; aborting it");
        fleet.abort_all();
    }
    // Every node builds its own snapshots: the leader's (at the end) are the ones
    // that stall serving.
    let leader_end = after.leader_id.unwrap_or(leader_b);
    let snapshots = log_starts
        .iter()
        .find(|(id, _)| *id == leader_end)
        .and_then(|(id, start)| group.log(*id).map(|log| snapshots::read(log, *start)))
        .unwrap_or_default();
    group.stop();

    let (n, m) = (size as f64, size as f64);
    let per_worker = cpu_a[0] / n;
    let mut case = ScaleCase {
        workers: size,
        consumers: size,
        jobs,
        tasks,
        register_s,
        join_s,
        setup_ops,
        steady_ops,
        steady_events: events.into_iter().collect(),
        leader_ms_per_worker_s: per_worker,
        leader_ms_per_consumer_s: (cpu_b[0] - cpu_a[0]).max(0.0) / m,
        cpu_a_ms_per_s: cpu_a,
        cpu_b_ms_per_s: cpu_b,
        rss: [rss0, rss1, rss2],
        rss_per_worker: rss1.saturating_sub(rss0) as f64 / n,
        rss_per_job: rss2.saturating_sub(rss1) as f64 / jobs as f64,
        rss_per_task: rss2.saturating_sub(rss1) as f64 / tasks as f64,
        snapshots,
        workers_lost,
        term: [before.term, after.term],
        leader: [leader_b, leader_end],
        simulator_ms_per_s,
        log_entries: after.last_log_index.unwrap_or(0),
        broke: vec![],
    };
    case.broke = broke(&case);
    Ok(case)
}

/// The leading node's id and the pids of the nodes, the leader's first.
async fn leader_first(group: &Quorum) -> anyhow::Result<(u64, Vec<String>)> {
    let leader = group.leader().await?;
    let pids = std::iter::once(leader)
        .chain((1..=3).filter(|i| *i != leader))
        .map(|id| Ok(group.node(id).context("a node is not running")?.id().to_string()))
        .collect::<anyhow::Result<Vec<String>>>()?;
    Ok((leader, pids))
}

/// Waits up to `within` for `n` outcomes on `rx`; an error naming the `stage` unless
/// all `n` arrived and succeeded (with the calls' last errors).
async fn all_ok(
    rx: &mut mpsc::Receiver<bool>,
    n: usize,
    within: Duration,
    (stage, what): (&str, &str),
    ops: &Ops,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let (mut seen, mut ok) = (0, 0);
    while seen < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(success)) => {
                seen += 1;
                ok += usize::from(success);
            }
            _ => break,
        }
    }
    anyhow::ensure!(
        ok == n,
        "broke at {stage}: {ok} of {n} {what} within {within:?} ({})",
        errors_of(&ops.figures().0)
    );
    Ok(())
}

/// CPU-ms per second of each process over `window`.
async fn cpu_over(pids: &[String], window: Duration) -> anyhow::Result<Vec<f64>> {
    let before = pids.iter().map(|p| cpu_time(p)).collect::<anyhow::Result<Vec<_>>>()?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let secs = t0.elapsed().as_secs_f64();
    pids.iter()
        .zip(before)
        .map(|(p, b)| Ok(cpu_time(p)?.saturating_sub(b).as_secs_f64() * 1e3 / secs))
        .collect()
}

fn errors_of(ops: &[OpFigures]) -> String {
    let errors: Vec<String> = ops
        .iter()
        .filter(|o| o.errors > 0)
        .map(|o| {
            format!(
                "{}: {} errors, e.g. {}",
                o.name,
                o.errors,
                o.last_error.as_deref().unwrap_or("")
            )
        })
        .collect();
    if errors.is_empty() {
        "no call failed".into()
    } else {
        errors.join("; ")
    }
}

/// Where a size broke, plainly: failed calls, operations slower than a second at
/// p99, workers or consumers the dispatcher forgot, and a grant p99 over target.
fn broke(c: &ScaleCase) -> Vec<String> {
    let mut out = vec![];
    for (when, ops) in [("setup", &c.setup_ops), ("steady", &c.steady_ops)] {
        for o in ops.iter() {
            if o.errors > 0 {
                let e = o.last_error.as_deref().unwrap_or("");
                out.push(format!("{when}: {}: {} calls failed (e.g. {e})", o.name, o.errors));
            }
            if let Some(l) = o.latency.filter(|l| l.p99_ms > BROKEN_P99_MS) {
                out.push(format!("{when}: {} p99 {:.0} ms > {BROKEN_P99_MS} ms", o.name, l.p99_ms));
            }
        }
    }
    for (event, n) in &c.steady_events {
        if matches!(event, Event::WorkerReRegistered | Event::ClientLost) && *n > 0 {
            out.push(format!("steady: {event:?} {n} times"));
        }
    }
    if c.term[1] != c.term[0] || c.leader[1] != c.leader[0] {
        out.push(format!(
            "elections in the steady window: term {} → {}, leader node {} → {} (the CPU \
             columns follow the leader at its start)",
            c.term[0], c.term[1], c.leader[0], c.leader[1]
        ));
    }
    if c.workers_lost > 0 {
        out.push(format!("{} workers declared lost by the leader", c.workers_lost));
    }
    let grant = c.steady_ops.iter().find(|o| o.op == super::ops::Op::GetSplit);
    if let Some(l) = grant.and_then(|o| o.latency).filter(|l| l.p99_ms > GRANT_P99_TARGET_MS) {
        out.push(format!("GetSplit p99 {:.1} ms > the {GRANT_P99_TARGET_MS} ms target", l.p99_ms));
    }
    out
}
