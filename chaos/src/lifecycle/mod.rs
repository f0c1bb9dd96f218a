//! The service-lifecycle soak (`--scenario lifecycle`, issue 31): one cluster
//! serves a seeded stream of short and long jobs — named and anonymous, OFF and
//! DYNAMIC, exactly-once and not, `range`, `range.map(add)`, `range.batch` —
//! at most [`MAX_JOBS`] at once, for a set time, while workers are SIGKILLed
//! and replaced on new addresses, drained and replaced, exactly-once readers
//! checkpoint and restore, and the dispatchers restart one by one.
//!
//! ```text
//!  Start{lifecycle} ─► cluster up ─► WorkerUp × W ─┬─► jobs: while the window lasts,
//!                                                  │   ≤ MAX_JOBS at once ─► JobStart, JobEnd
//!                                                  └─► events: kill / drain / rolling restart
//!                                                      ─► FaultStart, WorkerUp, FaultEnd
//!  window over ─► no new job, no new event ─► every job ends (each has a deadline)
//!  ─► cluster down ─► checker::lifecycle ─► report
//! ```
//! Why one long-lived cluster rather than a run per job: the defects this finds
//! live between jobs (a worker that died stayed in every later job: issue 31,
//! defect 1), so jobs must start after, during and long after each event.

mod events;
mod jobs;
pub mod plan;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

pub use jobs::JOB_DEADLINE;

use crate::cluster::Cluster;
use crate::history::Event;
use crate::recorder::Recorder;
use crate::runner::{self, RunConfig, RunOutcome};
use crate::scenarios::Scenario;

/// Jobs running at once, at most.
pub const MAX_JOBS: usize = 4;

/// Runs the lifecycle soak with jobs started for `window`; checks and reports it
/// as any run (`runner::conclude`).
pub async fn run(
    scenario: &Scenario,
    seed: u64,
    window: Duration,
    cfg: &RunConfig,
) -> anyhow::Result<RunOutcome> {
    let started = Instant::now();
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("creating {}", cfg.dir.display()))?;
    let (recorder, writer) = Recorder::create(&cfg.dir.join("history.jsonl"))?;
    recorder
        .record(Event::Start {
            seed,
            scenario: scenario.name.to_string(),
            mode: "mixed".into(),
            dataset_len: 0,
            workers: scenario.workers,
            consumers: MAX_JOBS as u32,
            epochs: 0,
            work_dir_kind: scenario.storage.kind_name().to_string(),
            exactly_once: false,
            order: None,
            lifecycle: true,
        })
        .await;
    let notes = {
        let mut cluster = Cluster::start(runner::cluster_config(scenario, cfg)).await?;
        events::record_workers(&cluster, &recorder).await;
        let client = cluster.client(runner::dispatcher_policy())?;
        // One plan for each side: they draw from separate streams of the seed.
        let (over_tx, over_rx) = watch::channel(false);
        let starter = start_jobs(plan::Plan::new(seed), client, recorder.clone(), window, over_tx);
        let jobs = tokio::spawn(starter);
        let mut plan = plan::Plan::new(seed);
        let executed = events::run(&mut cluster, &mut plan, &recorder, over_rx).await;
        let (count, mut notes) = match executed {
            Ok(done) => done,
            Err(e) => {
                jobs.abort();
                return Err(e.context(format!("{} seed {seed}", scenario.name)));
            }
        };
        jobs.await.context("the job starter panicked")?;
        notes.insert(0, format!("{count} lifecycle events"));
        notes.extend(
            cluster.crashed().into_iter().map(|c| format!("at the end: {c} had exited on its own")),
        );
        notes
    };
    drop(recorder);
    let events = writer.finish().await?;
    runner::conclude(scenario, seed, cfg, &events, notes, started)
}

/// Starts jobs from the plan while the window lasts (at most [`MAX_JOBS`] at
/// once), says the window is over, and waits for every job to end.
async fn start_jobs(
    mut plan: plan::Plan,
    client: sluice_client::Client,
    recorder: Recorder,
    window: Duration,
    over: watch::Sender<bool>,
) {
    let start = Instant::now();
    let slots = Arc::new(Semaphore::new(MAX_JOBS));
    let mut running = JoinSet::new();
    while start.elapsed() < window {
        let remaining = window.saturating_sub(start.elapsed());
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
            _ = tokio::time::sleep(remaining) => break,
        };
        let (job, spec) = plan.next_job();
        let (client, recorder) = (client.clone(), recorder.clone());
        running.spawn(async move {
            jobs::run(client, recorder, job, spec).await;
            drop(slot);
        });
        tokio::time::sleep(plan.job_gap()).await;
        while let Some(r) = running.try_join_next() {
            if let Err(e) = r {
                tracing::error!("a lifecycle job task failed: {e}");
            }
        }
    }
    let _ = over.send(true);
    while let Some(r) = running.join_next().await {
        if let Err(e) = r {
            tracing::error!("a lifecycle job task failed: {e}");
        }
    }
}
