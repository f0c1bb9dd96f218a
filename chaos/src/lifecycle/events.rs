//! The lifecycle events of a run, applied to the live cluster one at a time
//! while jobs come and go, each recorded as a `FaultStart` / `FaultEnd` pair
//! (and every worker started as a `WorkerUp`):
//!
//! ```text
//!  kill worker      SIGKILL w ─ wait ─ start w' on a new address ─ w' registered ─ end
//!  drain worker     SIGTERM w ─ w exited ─ start w' on a new address ─ w' registered ─ end
//!  rolling restart  for node 1, 2, 3: SIGKILL, start on its work_dir, wait until
//!                   the cluster is whole (a leader, every node caught up) ─ end
//! ```
//! A killed worker never comes back: the dispatcher must declare it lost and keep
//! it out of every later job (guarantee L11). Bounded: every wait has a deadline,
//! and no event starts once the run's job window is over.

use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;

use super::plan::{Action, Plan};
use crate::cluster::{Cluster, NODES};
use crate::faults::execute::RECOVERY_BOUND;
use crate::history::{Event, Fault};
use crate::recorder::Recorder;

/// A drained worker exits within its drain timeout (20 s by default) and 5 s
/// for connections; more is a note, and the worker is SIGKILLed.
const DRAIN_BOUND: Duration = Duration::from_secs(40);
/// A new worker registers within this long.
const REGISTER_BOUND: Duration = Duration::from_secs(60);

/// Records every running worker as up (the run's first workers).
pub async fn record_workers(cluster: &Cluster, recorder: &Recorder) {
    for w in cluster.running_workers() {
        let worker = cluster.worker_address(w).to_string();
        recorder.record(Event::WorkerUp { t_ms: recorder.now(), worker }).await;
    }
}

/// Applies the plan's events until `over` turns true; returns how many it applied
/// and notes (processes that exited on their own, a worker slow to drain).
pub async fn run(
    cluster: &mut Cluster,
    plan: &mut Plan,
    recorder: &Recorder,
    mut over: watch::Receiver<bool>,
) -> anyhow::Result<(u32, Vec<String>)> {
    let mut notes = Vec::new();
    let mut id = 0u32;
    loop {
        let (gap, action) = plan.next_event();
        if *over.borrow() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(gap) => {}
            _ = over.wait_for(|o| *o) => break,
        }
        id += 1;
        apply(cluster, action, id, recorder, &mut notes)
            .await
            .with_context(|| format!("lifecycle event #{id} ({action:?})"))?;
        for note in cluster.restart_crashed().await? {
            notes.push(format!("after event #{id}: {note}"));
        }
    }
    Ok((id, notes))
}

async fn apply(
    cluster: &mut Cluster,
    action: Action,
    id: u32,
    recorder: &Recorder,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let record = |e: Event| recorder.record(e);
    match action {
        Action::KillWorker { pick, replace_after } => {
            let w = pick_worker(cluster, pick)?;
            let worker = cluster.worker_address(w).to_string();
            record(Event::FaultStart {
                t_ms: recorder.now(),
                id,
                fault: Fault::WorkerKilled { worker },
            })
            .await;
            cluster.kill_worker(w);
            tokio::time::sleep(replace_after).await;
            replace(cluster, recorder).await?;
        }
        Action::DrainWorker { pick } => {
            let w = pick_worker(cluster, pick)?;
            let worker = cluster.worker_address(w).to_string();
            record(Event::FaultStart {
                t_ms: recorder.now(),
                id,
                fault: Fault::WorkerDrained { worker: worker.clone() },
            })
            .await;
            let exited = cluster.drain_worker(w, DRAIN_BOUND).await?;
            if !exited {
                notes.push(format!(
                    "event #{id}: worker {worker} did not exit within {DRAIN_BOUND:?} of \
                     SIGTERM (SIGKILLed)"
                ));
            }
            replace(cluster, recorder).await?;
        }
        Action::RollingRestart => {
            record(Event::FaultStart { t_ms: recorder.now(), id, fault: Fault::RollingRestart })
                .await;
            for node in 1..=NODES {
                cluster.start_dispatcher(node).await?;
                cluster.wait_caught_up(RECOVERY_BOUND).await.with_context(|| {
                    format!("the cluster was not whole within {RECOVERY_BOUND:?} of restarting node {node}")
                })?;
            }
        }
    }
    record(Event::FaultEnd { t_ms: recorder.now(), id }).await;
    Ok(())
}

/// A running worker, chosen by the plan's draw.
fn pick_worker(cluster: &Cluster, pick: u32) -> anyhow::Result<u32> {
    let running = cluster.running_workers();
    anyhow::ensure!(!running.is_empty(), "no worker is running");
    Ok(running[pick as usize % running.len()])
}

/// Starts a worker on a new address and waits until it registered.
async fn replace(cluster: &mut Cluster, recorder: &Recorder) -> anyhow::Result<()> {
    let w = cluster.add_worker().await?;
    let worker = cluster.worker_address(w).to_string();
    cluster.wait_worker_registered(&worker, REGISTER_BOUND).await?;
    recorder.record(Event::WorkerUp { t_ms: recorder.now(), worker }).await;
    Ok(())
}
