//! One run: one scenario, one seed.
//!
//! ```text
//!  Start ─► cluster up ─► register range(N) ─┬─► C consumers: epochs 0..E of the named
//!                                            │   job, every element → Element, each end → EpochEnd
//!                                            └─► fault executor: the seeded schedule
//!  both done ─► cluster down ─► checker::check ─► history.jsonl, report.json,
//!                                                 <scenario>-<seed>.svg, table
//! ```
//! Consumers are tasks in this process, each with its own [`Client`]. Every epoch
//! read has a deadline ([`EPOCH_DEADLINE`]), so a run always ends.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::checker::{self, CheckOptions, CheckResult};
use crate::cluster::{Cluster, ClusterConfig};
use crate::faults::execute::{self, Quiesce};
use crate::faults::Schedule;
use crate::history::{Event, OrderSpec};
use crate::recorder::Recorder;
use crate::report;
use crate::scenarios::Scenario;

/// Every epoch must end within this long after the later of its first element and
/// the last fault healed before its end. An undisturbed epoch takes a few seconds
/// (debug build, 2 cores); recovering from the worst fault (two nodes down or a
/// full restart: election, restart of the node processes, clients' and workers'
/// backoff up to 1 s and 2 s) takes well under 20 s. 60 s leaves room for a
/// loaded CI machine while still catching a read that hangs.
pub const COMPLETION_BOUND: Duration = Duration::from_secs(60);

/// The harness gives up on one epoch read after this long (recorded as its
/// outcome, so the checker reports it); keeps every run finite.
pub const EPOCH_DEADLINE: Duration = Duration::from_secs(300);

/// Worker and reader settings, which bound what a killed worker can take with it.
pub const WORKER_BUFFER: usize = 64;
pub const SPLITS_PER_REQUEST: u32 = 1;
/// Elements per message the consumers ask for (the worker's default is 64).
pub const ELEMENTS_PER_MESSAGE: u32 = 16;
/// Messages buffered per consumer (`max_outstanding_requests`).
pub const OUTSTANDING_MESSAGES: usize = 4;
/// Messages a worker queues per stream before the transport (`RESPONSE_BUFFER`
/// in worker/src/service.rs).
pub const WORKER_QUEUED_MESSAGES: u64 = 2;

/// The elements one worker kill may lose in DYNAMIC mode: all it holds that no
/// consumer has received.
///
/// ```text
///   task buffer (--buffer)                       WORKER_BUFFER
/// + the element the pipeline thread holds        1
/// + the split grant it reads and the one it asked ahead
///   (2 × --splits-per-request × --elements-per-split)
/// + per consumer stream: messages queued in the worker (2) and being built (1),
///   each ≤ ELEMENTS_PER_MESSAGE                  C × 3 × M
/// + per consumer: its client channel             C × OUTSTANDING_MESSAGES × M
/// ```
/// The last term is conservative (the channel is in the consumer's process and
/// survives the worker); it keeps the bound independent of how the client handles
/// a stream that failed.
pub fn max_loss_per_worker_kill(s: &Scenario) -> u64 {
    let m = ELEMENTS_PER_MESSAGE as u64;
    let c = s.consumers as u64;
    WORKER_BUFFER as u64
        + 1
        + 2 * SPLITS_PER_REQUEST as u64 * s.elements_per_split
        + c * (WORKER_QUEUED_MESSAGES + 1) * m
        + c * OUTSTANDING_MESSAGES as u64 * m
}

/// The checker's options for a scenario.
pub fn check_options(s: &Scenario) -> CheckOptions {
    CheckOptions {
        completion_bound: COMPLETION_BOUND,
        max_loss_per_worker_kill: max_loss_per_worker_kill(s),
    }
}

#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The `sluice` executable.
    pub sluice: PathBuf,
    /// This run's directory: history.jsonl, report.json, the chart, logs/.
    pub dir: PathBuf,
}

#[derive(Debug)]
pub struct RunOutcome {
    pub scenario: String,
    pub seed: u64,
    pub result: CheckResult,
    pub dir: PathBuf,
    /// From the executor: processes that died on their own, slow recoveries.
    pub notes: Vec<String>,
    pub elapsed: Duration,
}

/// Client → dispatcher: outlasts any fault (≤ 6 s held, then restarts).
pub(crate) fn dispatcher_policy() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_secs(1),
        deadline: Duration::from_secs(120),
        attempt_timeout: Duration::from_secs(5),
    }
}

/// Client → worker: outlasts a worker's kill and restart.
fn worker_policy() -> RetryPolicy {
    dispatcher_policy()
}

/// Runs `scenario` with `seed`; writes the history, report and chart in `cfg.dir`
/// and prints the table (and, on violations, the explanation). Violations are in
/// the outcome, not an error: an error means the run itself could not be done.
/// A lifecycle scenario runs in `crate::lifecycle` instead (`campaign.rs` picks).
pub async fn run(scenario: &Scenario, seed: u64, cfg: &RunConfig) -> anyhow::Result<RunOutcome> {
    let started = Instant::now();
    std::fs::create_dir_all(&cfg.dir).with_context(|| format!("creating {}", cfg.dir.display()))?;
    let schedule = Schedule::plan(scenario, seed);
    std::fs::write(cfg.dir.join("schedule.txt"), format!("{schedule:#?}\n"))?;
    let (recorder, writer) = Recorder::create(&cfg.dir.join("history.jsonl"))?;
    // The deterministic order is seeded with the run's seed.
    let order = (scenario.exactly_once && scenario.deterministic).then_some(seed);
    recorder
        .record(Event::Start {
            seed,
            scenario: scenario.name.to_string(),
            mode: scenario.mode.to_string(),
            dataset_len: scenario.dataset_len,
            workers: scenario.workers,
            consumers: scenario.consumers,
            epochs: scenario.epochs,
            work_dir_kind: scenario.storage.kind_name().to_string(),
            exactly_once: scenario.exactly_once,
            order: order
                .map(|seed| OrderSpec { seed, elements_per_split: scenario.elements_per_split }),
            lifecycle: false,
        })
        .await;

    let notes = {
        let mut cluster = Cluster::start(cluster_config(scenario, cfg)).await?;
        let client = cluster.client(dispatcher_policy())?;
        // Files a Parquet or WebDataset job reads: under the system temp
        // directory, one of the servers' default data roots on loopback.
        let data_dir = tempfile::Builder::new().prefix("sluice-chaos-data-").tempdir()?;
        let def = if order.is_some() {
            crate::trainers::ordered_dataset(scenario.dataset_len)
        } else if scenario.exactly_once {
            let (source, values) =
                crate::data::write(scenario.source, data_dir.path(), scenario.dataset_len)?;
            anyhow::ensure!(
                values == scenario.dataset_len,
                "scenario {}: its files hold {values} values, not dataset_len {}",
                scenario.name,
                scenario.dataset_len
            );
            crate::trainers::dataset(source)
        } else {
            DatasetDef::range(scenario.dataset_len as i64)
        };
        let dataset_id = client.register_dataset(&def, Some("chaos")).await?;
        let progress = Arc::new(AtomicU64::new(0));
        let quiesce = Quiesce::default();
        let mut consumers = JoinSet::new();
        let mut restart_tx = None;
        if scenario.exactly_once {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            restart_tx = Some(tx);
            let group = crate::trainers::TrainerGroup {
                client: cluster.client(dispatcher_policy())?,
                dataset_id: dataset_id.clone(),
                consumers: scenario.consumers,
                epochs: scenario.epochs,
                recorder: recorder.clone(),
                progress: progress.clone(),
                quiesce: quiesce.clone(),
                worker_policy: worker_policy(),
                elements_per_message: ELEMENTS_PER_MESSAGE,
                outstanding: OUTSTANDING_MESSAGES,
                epoch_deadline: EPOCH_DEADLINE,
                order,
            };
            consumers.spawn(group.run(rx));
        }
        for consumer in (0..scenario.consumers).filter(|_| !scenario.exactly_once) {
            let c = Consumer {
                client: cluster.client(dispatcher_policy())?,
                dataset_id: dataset_id.clone(),
                consumer,
                epochs: scenario.epochs,
                mode: scenario.mode,
                recorder: recorder.clone(),
                progress: progress.clone(),
                quiesce: quiesce.clone(),
            };
            consumers.spawn(c.run());
        }
        let (done_tx, done_rx) = watch::channel(false);
        let ctx = execute::Context {
            recorder: recorder.clone(),
            progress,
            done: done_rx,
            quiesce,
            trainers: restart_tx,
        };
        let mut executor = Box::pin(execute::run(&mut cluster, &schedule, ctx));
        let mut executed = None;
        loop {
            tokio::select! {
                r = &mut executor, if executed.is_none() => match r {
                    Ok(e) => executed = Some(e),
                    Err(e) => {
                        consumers.abort_all();
                        return Err(e.context(format!("{} seed {seed}: the fault executor failed", scenario.name)));
                    }
                },
                joined = consumers.join_next() => match joined {
                    Some(r) => r.context("a consumer task panicked")?,
                    None => break,
                },
            }
        }
        let _ = done_tx.send(true);
        let executed = match executed {
            Some(e) => {
                drop(executor); // ends its borrow of the cluster
                e
            }
            None => executor.await?,
        };
        let mut notes = executed.notes;
        notes.extend(
            cluster.crashed().into_iter().map(|c| format!("at the end: {c} had exited on its own")),
        );
        notes
    };
    drop(recorder);
    let events = writer.finish().await?;
    conclude(scenario, seed, cfg, &events, notes, started)
}

/// Checks a finished run's history, writes its report, chart and notes, prints
/// its table (and, on violations, the explanation).
pub(crate) fn conclude(
    scenario: &Scenario,
    seed: u64,
    cfg: &RunConfig,
    events: &[Event],
    notes: Vec<String>,
    started: Instant,
) -> anyhow::Result<RunOutcome> {
    let result = checker::check(events, &check_options(scenario));
    report::write_json(&cfg.dir, std::slice::from_ref(&result))?;
    report::write_chart(&cfg.dir, &format!("{}-{seed}", scenario.name), events)?;
    if !notes.is_empty() {
        std::fs::write(cfg.dir.join("notes.txt"), notes.join("\n") + "\n")?;
    }
    println!("{}", report::render_table(std::slice::from_ref(&result.summary)));
    for note in &notes {
        println!("note: {note}");
    }
    if !result.passed() {
        println!("{}", checker::explain(events, &result));
    }
    Ok(RunOutcome {
        scenario: scenario.name.to_string(),
        seed,
        result,
        dir: cfg.dir.clone(),
        notes,
        elapsed: started.elapsed(),
    })
}

pub(crate) fn cluster_config(s: &Scenario, cfg: &RunConfig) -> ClusterConfig {
    ClusterConfig {
        sluice: cfg.sluice.clone(),
        logs: cfg.dir.join("logs"),
        storage: s.storage,
        workers: s.workers,
        worker_buffer: WORKER_BUFFER,
        splits_per_request: SPLITS_PER_REQUEST,
        elements_per_split: s.elements_per_split,
        // Small: snapshots, purges and snapshot installs happen during the run.
        snapshot_every: 200,
        worker_timeout_secs: 120,
    }
}

/// One reader: every epoch of the named job, in order.
struct Consumer {
    client: Client,
    dataset_id: String,
    consumer: u32,
    epochs: u32,
    mode: ProcessingMode,
    recorder: Recorder,
    progress: Arc<AtomicU64>,
    quiesce: Quiesce,
}

impl Consumer {
    async fn run(self) {
        for epoch in 0..self.epochs {
            let outcome = match tokio::time::timeout(EPOCH_DEADLINE, self.read(epoch)).await {
                Ok(outcome) => outcome,
                Err(_) => format!("no end after {EPOCH_DEADLINE:?} (the harness's deadline)"),
            };
            let t_ms = self.recorder.now();
            tracing::info!(consumer = self.consumer, epoch, %outcome, t_ms, "epoch read ended");
            self.recorder
                .record(Event::EpochEnd { t_ms, consumer: self.consumer, epoch, outcome })
                .await;
        }
    }

    /// Reads one epoch; returns "end" or the error.
    async fn read(&self, epoch: u32) -> String {
        // The checker accounts for what worker kills lose (`checker/deliveries.rs`),
        // so an epoch that lost a killed worker's elements still ends ("end").
        let mut opts = ReadOptions::new(self.mode)
            .job_name("chaos")
            .max_outstanding_requests(OUTSTANDING_MESSAGES)
            .worker_retry(worker_policy())
            .accept_data_loss(true);
        opts.max_elements_per_message = ELEMENTS_PER_MESSAGE;
        opts.repetition = epoch as u64;
        let stream = {
            // Creating the iteration changes the registry: not during a full restart.
            let _entered = self.quiesce.enter().await;
            self.client.from_dataset_id(&self.dataset_id, opts).await
        };
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => return e.to_string(),
        };
        while let Some(item) = stream.next().await {
            let value = match item
                .map_err(|e| e.to_string())
                .and_then(|el| el.as_i64().map_err(|e| e.to_string()))
            {
                Ok(v) => v,
                Err(e) => return e,
            };
            let t_ms = self.recorder.now();
            self.recorder
                .record(Event::Element { t_ms, consumer: self.consumer, epoch, value })
                .await;
            self.progress.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(report) = stream.loss_report() {
            tracing::info!(consumer = self.consumer, epoch, %report, "epoch lost data (accepted)");
        }
        "end".to_string()
    }
}
