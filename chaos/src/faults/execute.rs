//! Applies a [`Schedule`] to a live [`Cluster`] while the consumers read, and
//! records each fault as `FaultStart` / `FaultEnd` (and, around a full restart,
//! the registry) in the history.
//!
//! ```text
//!  wait until epoch 0 is partly read
//!  for each step: pause ─► resolve targets ─► FaultStart ─► inject ─► hold
//!                 ─► heal ─► FaultEnd ─► wait until the cluster is whole
//! ```
//! Bounded: a hold ends early when the reading ends; every wait has a deadline;
//! when the executor returns, every fault is healed (an error leaves the rest to
//! the cluster's drop, which kills everything).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use sluice_client::status::{IterationStatus, JobStatus, ServiceStatus};
use tokio::sync::{watch, OwnedRwLockWriteGuard, RwLock};

use super::{Link, Planned, Schedule};
use crate::cluster::{Cluster, NODES};
use crate::history::{Event, Fault};
use crate::proxy::Mode;
use crate::recorder::Recorder;

/// How long the cluster may take to be whole again after a fault healed (a
/// leader, every node caught up) before the executor stops injecting.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(60);
/// How long the dispatchers' durable state may take to settle once workers are
/// paused and new epochs held back, before a full restart.
const QUIESCE_BOUND: Duration = Duration::from_secs(20);

/// Lets the executor hold consumers back from starting an epoch (creating an
/// iteration changes the registry) while it records the registry around a full
/// restart. Consumers hold [`Quiesce::enter`] from before `from_dataset_id` until
/// it returned.
#[derive(Clone, Default)]
pub struct Quiesce(Arc<RwLock<()>>);

impl Quiesce {
    pub async fn enter(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.0.clone().read_owned().await
    }

    async fn hold(&self) -> anyhow::Result<OwnedRwLockWriteGuard<()>> {
        tokio::time::timeout(QUIESCE_BOUND, self.0.clone().write_owned())
            .await
            .context("consumers did not finish starting their epochs")
    }
}

/// What the executor shares with the consumers.
pub struct Context {
    pub recorder: Recorder,
    /// Elements received by all consumers so far.
    pub progress: Arc<AtomicU64>,
    /// True once every consumer finished reading.
    pub done: watch::Receiver<bool>,
    pub quiesce: Quiesce,
    /// Exactly-once runs: asks the trainer group to restart its trainers with
    /// this many consumers; the group answers once the new ones started.
    pub trainers: Option<tokio::sync::mpsc::Sender<RestartRequest>>,
}

/// To the trainer group of an exactly-once run (`trainers.rs`): stop every
/// trainer and restore `consumers` of them from the last checkpoint.
pub struct RestartRequest {
    pub consumers: u32,
    /// Answered once the new trainers started (or the run is over).
    pub done: tokio::sync::oneshot::Sender<()>,
}

/// What happened, beyond the history.
#[derive(Debug, Default)]
pub struct Executed {
    pub injected: usize,
    /// Things worth a human's look: a process that died on its own, a dispatcher
    /// that had to be restarted after the S3 outage, a cluster slow to recover.
    pub notes: Vec<String>,
}

/// Runs the schedule; returns when it is done or the reading ended.
pub async fn run(
    cluster: &mut Cluster,
    schedule: &Schedule,
    mut ctx: Context,
) -> anyhow::Result<Executed> {
    let mut out = Executed::default();
    while !*ctx.done.borrow()
        && ctx.progress.load(Ordering::Relaxed) < schedule.first_after_elements
    {
        wait_or_done(Duration::from_millis(20), &mut ctx.done).await;
    }
    for (id, step) in schedule.steps.iter().enumerate() {
        if !wait_or_done(step.after, &mut ctx.done).await {
            break;
        }
        let id = id as u32;
        apply(cluster, id, step.fault, step.hold, &mut ctx, &mut out)
            .await
            .with_context(|| format!("fault #{id} ({:?})", step.fault))?;
        out.injected += 1;
        for crashed in cluster.restart_crashed().await? {
            out.notes.push(format!("after fault #{id}: {crashed}"));
        }
        if let Err(e) = cluster.wait_caught_up(RECOVERY_BOUND).await {
            out.notes.push(format!("after fault #{id}: the cluster is not whole again: {e:#}"));
            break;
        }
    }
    Ok(out)
}

/// Sleeps `d`, or less if the reading ends; false if it has ended.
async fn wait_or_done(d: Duration, done: &mut watch::Receiver<bool>) -> bool {
    if *done.borrow() {
        return false;
    }
    let _ = tokio::time::timeout(d, done.wait_for(|d| *d)).await;
    !*done.borrow()
}

async fn start(ctx: &Context, id: u32, fault: Fault) {
    let t_ms = ctx.recorder.now();
    tracing::info!(id, ?fault, t_ms, "--- fault");
    ctx.recorder.record(Event::FaultStart { t_ms, id, fault }).await;
}

async fn end(ctx: &Context, id: u32) {
    let t_ms = ctx.recorder.now();
    tracing::info!(id, t_ms, "--- healed");
    ctx.recorder.record(Event::FaultEnd { t_ms, id }).await;
}

/// The `pick % 2`-th node other than `leader`.
fn follower(leader: u64, pick: usize) -> u64 {
    let followers: Vec<u64> = (1..=NODES).filter(|n| *n != leader).collect();
    followers[pick % followers.len()]
}

async fn pair(cluster: &Cluster, link: Link) -> anyhow::Result<(u64, u64)> {
    Ok(match link {
        Link::WithLeader { pick } => {
            let leader = cluster.leader(RECOVERY_BOUND).await?;
            (leader, follower(leader, pick))
        }
        Link::Pair(a, b) => (a, b),
    })
}

/// Injects one fault, holds it, heals it.
async fn apply(
    cluster: &mut Cluster,
    id: u32,
    planned: Planned,
    hold: Duration,
    ctx: &mut Context,
    out: &mut Executed,
) -> anyhow::Result<()> {
    match planned {
        Planned::KillLeader | Planned::KillFollower { .. } | Planned::Wipe { .. } => {
            let leader = cluster.leader(RECOVERY_BOUND).await?;
            let (node, fault) = match planned {
                Planned::KillLeader => {
                    (leader, Fault::KillDispatcher { node: leader, was_leader: true })
                }
                Planned::KillFollower { pick } => {
                    let node = follower(leader, pick);
                    (node, Fault::KillDispatcher { node, was_leader: false })
                }
                Planned::Wipe { pick } => {
                    let node = follower(leader, pick);
                    (node, Fault::WipeDispatcher { node })
                }
                _ => unreachable!("matched above"),
            };
            start(ctx, id, fault).await;
            cluster.kill_dispatcher(node);
            if matches!(planned, Planned::Wipe { .. }) {
                cluster.wipe_dispatcher(node)?;
            }
            wait_or_done(hold, &mut ctx.done).await;
            cluster.start_dispatcher(node).await?;
        }
        Planned::WipeWithCrash { pick } => {
            let leader = cluster.leader(RECOVERY_BOUND).await?;
            let (g, f) = (follower(leader, pick), follower(leader, pick + 1));
            start(ctx, id, Fault::WipeWithCrash { wiped: f, down: vec![g, leader] }).await;
            cluster.kill_dispatcher(g);
            // Splits commit on the leader and f meanwhile; g lacks them.
            wait_or_done(hold / 2, &mut ctx.done).await;
            cluster.kill_dispatcher(leader);
            cluster.kill_dispatcher(f);
            cluster.wipe_dispatcher(f)?;
            cluster.start_dispatcher(f).await?;
            cluster.start_dispatcher(g).await?;
            wait_or_done(hold / 2, &mut ctx.done).await;
            cluster.start_dispatcher(leader).await?;
        }
        Planned::Pause { leader: pause_leader, pick } => {
            let leader = cluster.leader(RECOVERY_BOUND).await?;
            let node = if pause_leader { leader } else { follower(leader, pick) };
            start(ctx, id, Fault::PauseDispatcher { node }).await;
            cluster.pause_dispatcher(node)?;
            wait_or_done(hold, &mut ctx.done).await;
            cluster.resume_dispatcher(node)?;
        }
        Planned::KillTwo { pick } => {
            let leader = cluster.leader(RECOVERY_BOUND).await?;
            let nodes = vec![leader, follower(leader, pick)];
            start(ctx, id, Fault::KillTwoDispatchers { nodes: nodes.clone() }).await;
            nodes.iter().for_each(|n| cluster.kill_dispatcher(*n));
            wait_or_done(hold, &mut ctx.done).await;
            for n in &nodes {
                cluster.start_dispatcher(*n).await?;
            }
        }
        Planned::FullRestart => full_restart(cluster, id, hold, ctx).await?,
        Planned::Partition(link) | Planned::Drop(link) | Planned::Delay { link, .. } => {
            let (a, b) = pair(cluster, link).await?;
            let (fault, mode) = match planned {
                Planned::Partition(_) => (Fault::Partition { a, b }, Mode::Partition),
                Planned::Drop(_) => (Fault::Drop { a, b }, Mode::Drop),
                Planned::Delay { ms, .. } => (Fault::Delay { a, b, ms }, Mode::Delay(ms)),
                _ => unreachable!("matched above"),
            };
            start(ctx, id, fault).await;
            cluster.set_link(a, b, mode);
            wait_or_done(hold, &mut ctx.done).await;
            cluster.set_link(a, b, Mode::Pass);
        }
        Planned::S3Slow { ms } => {
            start(ctx, id, Fault::S3Slow { ms }).await;
            cluster.set_s3(Mode::Delay(ms))?;
            wait_or_done(hold, &mut ctx.done).await;
            cluster.set_s3(Mode::Pass)?;
        }
        Planned::S3Down => {
            start(ctx, id, Fault::S3Down).await;
            cluster.set_s3(Mode::Drop)?;
            wait_or_done(hold, &mut ctx.done).await;
            cluster.set_s3(Mode::Pass)?;
            restart_stopped_raft(cluster, id, out).await?;
        }
        Planned::KillWorker { worker } => {
            start(ctx, id, Fault::KillWorker { worker }).await;
            cluster.kill_worker(worker);
            wait_or_done(hold, &mut ctx.done).await;
            cluster.start_worker(worker).await?;
        }
        Planned::RestartTrainers { consumers } => {
            let Some(trainers) = &ctx.trainers else {
                bail!("a trainer restart was planned in a run without exactly-once trainers");
            };
            start(ctx, id, Fault::RestartTrainers { consumers }).await;
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            let request = RestartRequest { consumers, done: done_tx };
            // The group may have finished its last epoch: then nothing restarts.
            if trainers.send(request).await.is_ok() {
                let _ = tokio::time::timeout(RECOVERY_BOUND, done_rx).await;
            }
            wait_or_done(hold, &mut ctx.done).await;
        }
    }
    end(ctx, id).await;
    Ok(())
}

/// After an S3 outage: a node whose Raft stopped on a journal error but whose
/// process still runs (role "shutdown") serves nothing until restarted. Restart it,
/// as a supervisor with a liveness check on `raft.role` would, and say so. (A
/// dispatcher now exits when its Raft stops; `Cluster::restart_crashed` covers that.)
async fn restart_stopped_raft(
    cluster: &mut Cluster,
    id: u32,
    out: &mut Executed,
) -> anyhow::Result<()> {
    // Give the journal's own retries a moment to succeed now that S3 is back.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let stopped: Vec<u64> = cluster
            .statuses()
            .await
            .into_iter()
            .filter(|(_, s)| {
                s.as_ref().and_then(|s| s.raft.as_ref()).is_some_and(|r| r.role == "shutdown")
            })
            .map(|(n, _)| n)
            .collect();
        if stopped.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            for node in stopped {
                out.notes.push(format!(
                    "fault #{id} (S3 down): node {node}'s Raft had stopped (journal error); restarted it"
                ));
                cluster.kill_dispatcher(node);
                cluster.start_dispatcher(node).await?;
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Quiesce (no new epochs, workers paused, registry settled), record the
/// registry, SIGKILL all three, hold, restart them, record it again, resume.
async fn full_restart(
    cluster: &mut Cluster,
    id: u32,
    hold: Duration,
    ctx: &mut Context,
) -> anyhow::Result<()> {
    let quiet = ctx.quiesce.hold().await?;
    start(ctx, id, Fault::FullRestart).await;
    cluster.pause_workers(true)?;
    let result = async {
        let before = settled_registry(cluster).await?;
        ctx.recorder
            .record(Event::Registry {
                t_ms: ctx.recorder.now(),
                when: "before".into(),
                digest: before,
            })
            .await;
        for node in 1..=NODES {
            cluster.kill_dispatcher(node);
        }
        wait_or_done(hold, &mut ctx.done).await;
        for node in 1..=NODES {
            cluster.start_dispatcher(node).await?;
        }
        let after = registry_digest(&cluster.leader_status(RECOVERY_BOUND).await?);
        ctx.recorder
            .record(Event::Registry {
                t_ms: ctx.recorder.now(),
                when: "after".into(),
                digest: after,
            })
            .await;
        anyhow::Ok(())
    }
    .await;
    cluster.pause_workers(false)?;
    drop(quiet);
    result
}

/// The leader's registry once two reads 300 ms apart agree (a split granted just
/// before the workers paused may still be committing).
async fn settled_registry(cluster: &Cluster) -> anyhow::Result<String> {
    let start = Instant::now();
    let mut last = registry_digest(&cluster.leader_status(QUIESCE_BOUND).await?);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = registry_digest(&cluster.leader_status(QUIESCE_BOUND).await?);
        if now == last {
            return Ok(now);
        }
        if start.elapsed() > QUIESCE_BOUND {
            bail!("the registry still changes {QUIESCE_BOUND:?} after pausing the workers");
        }
        last = now;
    }
}

/// The durable registry as one canonical string: datasets; jobs; their iterations
/// with tasks, finished flags and split cursors. Soft fields (client counts,
/// workers' heartbeat times, Raft positions) are left out.
pub fn registry_digest(s: &ServiceStatus) -> String {
    let mut datasets: Vec<String> = s
        .datasets
        .iter()
        .map(|d| format!("dataset {} cardinality {:?}", d.dataset_id, d.source_cardinality))
        .collect();
    datasets.sort();
    let mut jobs: Vec<&JobStatus> = s.jobs.iter().collect();
    jobs.sort_by_key(|j| j.job_id);
    let mut lines = datasets;
    for j in jobs {
        lines.push(format!(
            "job {} {:?} dataset {} mode {:?}",
            j.job_id, j.job_name, j.dataset_id, j.mode
        ));
        let mut its: Vec<&IterationStatus> = j.iterations.iter().collect();
        its.sort_by_key(|it| it.iteration_id);
        for it in its {
            lines.push(format!(
                "  iteration {} repetition {} tasks {}/{} finished {} cursor {:?}@{:?}",
                it.iteration_id,
                it.repetition,
                it.finished_tasks,
                it.tasks,
                it.finished,
                it.split_repetition,
                it.split_cursor
            ));
        }
    }
    lines.join("\n")
}
