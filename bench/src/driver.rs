//! Driving a dispatcher the way W workers in DYNAMIC mode would, without workers.
//!
//! [`Fleet::register`] registers W fake workers (made-up addresses `127.0.0.1:1`,
//! `127.0.0.1:2`, …: the dispatcher never dials workers). [`Fleet::new_iteration`]
//! registers `range(N)`, creates an anonymous DYNAMIC job and its iteration (one task
//! per worker), and learns each worker's task from its heartbeat's `new_tasks`: one
//! [`Lane`] per worker. [`drive`] runs one tokio task per lane, each calling `GetSplit`
//! with its own task id, worker uid and sequence 0, 1, 2, … until end of splits, the
//! shared count bound or the (movable) stop time. [`ExactlyOnce`] checks the union of
//! the answered ranges.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use sluice_client::{DispatcherClient, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;

use crate::measure::Latency;

/// The retry policy of the lanes: a worker's default (`WorkerConfig::dispatcher_retry`),
/// with a 30 s deadline so that no call outlives the bench by much.
pub fn lane_policy() -> RetryPolicy {
    RetryPolicy::default().with_deadline(Duration::from_secs(30))
}

struct FakeWorker {
    client: DispatcherClient,
    address: String,
    uid: u64,
    /// Every task id this worker was given (sent as `current_tasks`).
    tasks: Vec<u64>,
}

/// W registered fake workers, each with its own connection(s) to the dispatcher(s).
pub struct Fleet {
    workers: Vec<FakeWorker>,
}

/// One worker's task in one iteration, and where its split sequence stands.
pub struct Lane {
    pub client: DispatcherClient,
    pub task_id: u64,
    pub worker_uid: u64,
    pub next_sequence: u64,
    /// Splits asked per `GetSplit` (`max_splits`); a grant may hold up to this many.
    pub max_splits: u32,
}

impl Lane {
    pub fn request(&self) -> pb::GetSplitRequest {
        pb::GetSplitRequest {
            task_id: self.task_id,
            worker_uid: self.worker_uid,
            sequence: self.next_sequence,
            split_provider_index: 0,
            repetition: 0,
            max_splits: self.max_splits,
        }
    }
}

impl Fleet {
    pub async fn register(addresses: &[String], workers: usize) -> anyhow::Result<Fleet> {
        let mut out = vec![];
        for i in 0..workers {
            let client = DispatcherClient::new(addresses, lane_policy())?;
            let address = format!("127.0.0.1:{}", i + 1);
            // Distinct per worker and per bench run, like a worker's random uid.
            let uid = 0x5eed_0000_0000 + ((std::process::id() as u64) << 8) + i as u64;
            let req = pb::RegisterWorkerRequest {
                address: address.clone(),
                worker_uid: uid,
                functions: vec![],
                python_version: String::new(),
            };
            let resp = client.register_worker(req).await.context("RegisterWorker")?;
            let tasks = resp.tasks.iter().map(|t| t.task_id).collect();
            out.push(FakeWorker { client, address, uid, tasks });
        }
        Ok(Fleet { workers: out })
    }

    /// A new DYNAMIC iteration over `range(elements)`; one lane per worker, each
    /// asking for `max_splits` splits per `GetSplit`.
    pub async fn new_iteration(
        &mut self,
        elements: u64,
        max_splits: u32,
    ) -> anyhow::Result<Vec<Lane>> {
        let admin = &self.workers.first().context("no workers")?.client;
        let def = DatasetDef::range(i64::try_from(elements).context("elements")?);
        let dataset = admin
            .register_dataset(pb::RegisterDatasetRequest {
                dataset: Some(pb::DatasetDef::from(&def)),
                dataset_id: String::new(),
            })
            .await
            .context("RegisterDataset")?;
        let job = admin
            .get_or_create_job(pb::GetOrCreateJobRequest {
                dataset_id: dataset.dataset_id,
                mode: pb::ProcessingMode::Dynamic as i32,
                job_name: String::new(),
                target_workers: 0,
                use_cross_trainer_cache: false,
                num_consumers: None,
                ..Default::default()
            })
            .await
            .context("GetOrCreateJob")?;
        let iteration = admin
            .get_or_create_iteration(pb::GetOrCreateIterationRequest {
                job_id: job.job_id,
                repetition: 0,
                ..Default::default()
            })
            .await
            .context("GetOrCreateIteration")?;
        let mut lanes = vec![];
        for w in &mut self.workers {
            let resp = w
                .client
                .worker_heartbeat(pb::WorkerHeartbeatRequest {
                    address: w.address.clone(),
                    worker_uid: w.uid,
                    current_tasks: w.tasks.clone(),
                    finished_tasks: vec![],
                    wait_for_change_ms: 0,
                    errors_ignored: 0,
                    ..Default::default()
                })
                .await
                .context("WorkerHeartbeat")?;
            let task = resp
                .new_tasks
                .iter()
                .find(|t| t.iteration_id == iteration.iteration_id)
                .with_context(|| {
                    format!(
                        "worker {} got no task in iteration {}",
                        w.address, iteration.iteration_id
                    )
                })?;
            w.tasks.push(task.task_id);
            lanes.push(Lane {
                client: w.client.clone(),
                task_id: task.task_id,
                worker_uid: w.uid,
                next_sequence: 0,
                max_splits,
            });
        }
        Ok(lanes)
    }
}

/// What every lane reads and the controller may move: counts and the stop time.
pub struct Shared {
    pub t0: Instant,
    /// Requests started (claimed against the count bound).
    issued: AtomicU64,
    max_splits: u64,
    /// Lanes start no new request once `t0.elapsed()` passes this (µs).
    stop_at_us: AtomicU64,
    /// Splits answered so far.
    pub answered: AtomicU64,
    /// Set by the controller (µs since `t0`; `u64::MAX` until then): answers to
    /// requests sent after it are counted in `answered_after_mark`.
    mark_us: AtomicU64,
    pub answered_after_mark: AtomicU64,
}

impl Shared {
    pub fn new(max_splits: u64, stop_after: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            t0: Instant::now(),
            issued: AtomicU64::new(0),
            max_splits,
            stop_at_us: AtomicU64::new(stop_after.as_micros() as u64),
            answered: AtomicU64::new(0),
            mark_us: AtomicU64::new(u64::MAX),
            answered_after_mark: AtomicU64::new(0),
        })
    }

    pub fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Sets the mark to now; returns it.
    pub fn mark(&self) -> u64 {
        let now = self.now_us();
        self.mark_us.store(now, Ordering::Relaxed);
        now
    }

    /// Moves the stop time to `after` from now.
    pub fn stop_in(&self, after: Duration) {
        self.stop_at_us.store(self.now_us() + after.as_micros() as u64, Ordering::Relaxed);
    }
}

/// How a lane's loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    EndOfSplits,
    TimeBudget,
    CountBound,
    Error,
}

/// One lane's record.
pub struct LaneRun {
    pub lane: Lane,
    pub ranges: Vec<(u64, u64)>,
    /// (sent, answered) times of answered splits, in µs since `t0`.
    pub times_us: Vec<(u64, u64)>,
    /// Duration of each successful call (µs), retries included.
    pub call_us: Vec<u64>,
    pub ending: Ending,
    pub error: Option<String>,
}

/// Runs one loop per lane until each ends; returns the lanes' records.
pub async fn drive(lanes: Vec<Lane>, shared: Arc<Shared>) -> anyhow::Result<Vec<LaneRun>> {
    let tasks: Vec<_> =
        lanes.into_iter().map(|lane| tokio::spawn(run_lane(lane, shared.clone()))).collect();
    let mut out = vec![];
    for t in tasks {
        out.push(t.await.context("a split loop panicked")?);
    }
    Ok(out)
}

async fn run_lane(mut lane: Lane, shared: Arc<Shared>) -> LaneRun {
    let (mut ranges, mut times_us, mut call_us) = (vec![], vec![], vec![]);
    let mut error = None;
    let ending = loop {
        if shared.now_us() >= shared.stop_at_us.load(Ordering::Relaxed) {
            break Ending::TimeBudget;
        }
        if shared.issued.fetch_add(1, Ordering::Relaxed) >= shared.max_splits {
            break Ending::CountBound;
        }
        let started = Instant::now();
        let sent_us = shared.now_us();
        match lane.client.get_split(lane.request()).await {
            Ok(resp) => {
                lane.next_sequence += 1;
                if resp.end_of_splits {
                    break Ending::EndOfSplits;
                }
                let split = resp.split.unwrap_or_default();
                let now = shared.now_us();
                ranges.push((split.begin, split.end));
                times_us.push((sent_us, now));
                call_us.push(started.elapsed().as_micros() as u64);
                shared.answered.fetch_add(1, Ordering::Relaxed);
                if sent_us > shared.mark_us.load(Ordering::Relaxed) {
                    shared.answered_after_mark.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                error = Some(format!("task {}: {e}", lane.task_id));
                break Ending::Error;
            }
        }
    };
    LaneRun { lane, ranges, times_us, call_us, ending, error }
}

/// The figures of one [`drive`].
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Splits committed: a grant of k splits counts k (with one element per split,
    /// the length of its range).
    pub splits: u64,
    /// Answered `GetSplit` calls (grants).
    pub grants: u64,
    pub elapsed_s: f64,
    pub splits_per_s: f64,
    /// Per-call latency of `GetSplit` as a lane saw it (retries included).
    pub call: Option<Latency>,
    /// How the lanes ended, e.g. `16 time_budget`.
    pub endings: String,
    pub errors: Vec<String>,
}

impl RunSummary {
    /// `elapsed`: from the start of the loops until the last one ended.
    pub fn of(runs: &[LaneRun], elapsed: Duration) -> RunSummary {
        let splits: u64 = runs.iter().flat_map(|r| r.ranges.iter()).map(|(b, e)| e - b).sum();
        let grants: u64 = runs.iter().map(|r| r.ranges.len() as u64).sum();
        let calls: Vec<Duration> = runs
            .iter()
            .flat_map(|r| r.call_us.iter().map(|us| Duration::from_micros(*us)))
            .collect();
        let mut endings = std::collections::BTreeMap::new();
        for r in runs {
            *endings.entry(format!("{:?}", r.ending)).or_insert(0) += 1;
        }
        let endings = endings.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>();
        RunSummary {
            splits,
            grants,
            elapsed_s: elapsed.as_secs_f64(),
            splits_per_s: splits as f64 / elapsed.as_secs_f64().max(1e-9),
            call: Latency::of(calls),
            endings: endings.join(", "),
            errors: runs.iter().filter_map(|r| r.error.clone()).collect(),
        }
    }
}

/// Whether the union of answered ranges covers each index at most once, and every
/// index below the highest one handed out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExactlyOnce {
    pub indices: u64,
    pub twice: u64,
    pub missing: u64,
    /// A few examples of each, for the report.
    pub first_twice: Vec<u64>,
    pub first_missing: Vec<u64>,
}

impl ExactlyOnce {
    pub fn check(ranges: impl Iterator<Item = (u64, u64)> + Clone) -> ExactlyOnce {
        let top = ranges.clone().map(|(_, e)| e).max().unwrap_or(0);
        let mut seen = vec![0u64; (top as usize).div_ceil(64)];
        let mut out = ExactlyOnce::default();
        for (b, e) in ranges {
            for i in b..e {
                let (w, bit) = ((i / 64) as usize, 1u64 << (i % 64));
                if seen[w] & bit != 0 {
                    out.twice += 1;
                    if out.first_twice.len() < 5 {
                        out.first_twice.push(i);
                    }
                } else {
                    seen[w] |= bit;
                    out.indices += 1;
                }
            }
        }
        for i in 0..top {
            if seen[(i / 64) as usize] & (1u64 << (i % 64)) == 0 {
                out.missing += 1;
                if out.first_missing.len() < 5 {
                    out.first_missing.push(i);
                }
            }
        }
        out
    }

    pub fn is_ok(&self) -> bool {
        self.twice == 0 && self.missing == 0
    }

    pub fn describe(&self) -> String {
        if self.is_ok() {
            return "ok".into();
        }
        let mut parts = vec![];
        if self.twice > 0 {
            parts.push(format!(
                "{} indices handed out twice (e.g. {:?})",
                self.twice, self.first_twice
            ));
        }
        if self.missing > 0 {
            parts.push(format!(
                "{} indices below the cursor never answered (e.g. {:?})",
                self.missing, self.first_missing
            ));
        }
        format!("VIOLATION: {}", parts.join("; "))
    }
}

/// The exactly-once check over every lane of a run.
pub fn check_runs(runs: &[LaneRun]) -> ExactlyOnce {
    ExactlyOnce::check(runs.iter().flat_map(|r| r.ranges.iter().copied()))
}
