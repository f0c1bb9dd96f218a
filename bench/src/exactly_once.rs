//! What exactly-once costs (docs/exactly-once.md), on one in-memory dispatcher and
//! 2 worker processes, read by this process:
//!
//! (a) **tracking** (here): DYNAMIC `range(N)` int64 scalars read to the end,
//!     at-most-once and exactly-once alternately ([`RUNS`] each, same service,
//!     same workers, same data): elements/s, and the CPU µs per element of the
//!     reader (this process), the two workers and the dispatcher, from
//!     `/proc/<pid>/stat`. On 2 shared cores the CPU per element is the steadier
//!     figure: the rate is about the cores divided by the CPU all processes spend
//!     on an element. Every value is checked to arrive exactly once;
//! (b) **positions** and (c) **restore**: [`crate::eo_checkpoint`], on a second
//!     service whose splits are 100 elements.
//!
//! (d) **deterministic order**: two consumers, default vs deterministic
//!     ([`crate::deterministic`]), on the second service.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{ProcessingMode, ReadOptions};
use sluice_dataset::DatasetDef;

use crate::eo_checkpoint::{self, Checkpoints, ELEMENTS_PER_SPLIT};
use crate::measure::Outcome;
use crate::measure::Spread;
use crate::procstat::cpu_time;
use crate::service::Service;
use crate::streaming::{READ_TIMEOUT, WORKERS};

/// Runs of each delivery in (a), alternating.
pub const RUNS: usize = 5;
/// Source elements per split in (a): large enough that the split grants (one
/// round trip to the dispatcher per split and worker) are not what bounds the
/// rate, as in the OFF streaming case; the origins are per element (unit) all
/// the same. (With 100 per split both deliveries ran at ~260,000 elements/s,
/// bound by the grants.)
pub const TRACKING_ELEMENTS_PER_SPLIT: u64 = 10_000;

#[derive(Clone, Copy, Debug)]
pub struct ExactlyOnceConfig {
    /// `range(N)` of every read.
    pub elements: u64,
    /// Run (a) only: (b)-(d) are reported skipped (profiling the tracking).
    pub tracking_only: bool,
}

/// One read of (a).
#[derive(Clone, Debug, Serialize)]
pub struct TrackingRun {
    /// `at-most-once` or `exactly-once`.
    pub delivery: String,
    pub elements_per_s: f64,
    /// CPU µs per element over the read: this process, the workers together,
    /// the dispatcher.
    pub reader_us: f64,
    pub workers_us: f64,
    pub dispatcher_us: f64,
}

/// (a) summarised for one delivery.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tracking {
    pub elements_per_s: Spread,
    pub reader_us: Spread,
    pub workers_us: Spread,
    pub dispatcher_us: Spread,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExactlyOnceBench {
    pub elements: u64,
    pub elements_per_split: u64,
    pub at_most_once: Tracking,
    pub exactly_once: Tracking,
    /// Every run, in the order run.
    pub runs: Vec<TrackingRun>,
    /// (b) and (c); their failure leaves (a) standing.
    pub checkpoints: Outcome<Checkpoints>,
    /// (d) the deterministic order next to the default (`deterministic.rs`).
    pub deterministic: Outcome<crate::deterministic::DeterministicBench>,
}

impl ExactlyOnceBench {
    /// The cost of exactly-once tracking, in percent of the at-most-once rate
    /// (medians).
    pub fn overhead_percent(&self) -> f64 {
        100.0
            * (1.0
                - self.exactly_once.elements_per_s.median
                    / self.at_most_once.elements_per_s.median.max(1e-9))
    }

    /// The cost of each alternating pair (exactly-once run i against
    /// at-most-once run i), in percent: how far the median can be trusted.
    pub fn paired_overhead_percent(&self) -> Spread {
        let rate = |d: &str| -> Vec<f64> {
            self.runs.iter().filter(|r| r.delivery == d).map(|r| r.elements_per_s).collect()
        };
        let pairs = rate("at-most-once")
            .into_iter()
            .zip(rate("exactly-once"))
            .map(|(amo, eo)| 100.0 * (1.0 - eo / amo.max(1e-9)))
            .collect();
        Spread::of(pairs)
    }
}

fn options(exactly_once: bool, job: &str) -> ReadOptions {
    let o = ReadOptions::new(ProcessingMode::Dynamic).job_name(job);
    if exactly_once {
        o.exactly_once(true)
    } else {
        o
    }
}

pub async fn run(
    exe: &std::path::Path,
    cfg: ExactlyOnceConfig,
    logs: &std::path::Path,
) -> anyhow::Result<ExactlyOnceBench> {
    if cfg.elements < 2 * TRACKING_ELEMENTS_PER_SPLIT || cfg.elements > 100_000_000 {
        bail!(
            "--exactly-once-elements must be {}..=100000000 (two splits of {} at least)",
            2 * TRACKING_ELEMENTS_PER_SPLIT,
            TRACKING_ELEMENTS_PER_SPLIT
        );
    }
    let service =
        Service::start(exe, WORKERS, TRACKING_ELEMENTS_PER_SPLIT, logs, "exactly-once").await?;
    let def = DatasetDef::range(cfg.elements as i64);
    let mut runs = vec![];
    for i in 0..RUNS {
        for exactly_once in [false, true] {
            let job = format!("eo-bench-{i}-{exactly_once}");
            let name = if exactly_once { "exactly-once" } else { "at-most-once" };
            let run = read_tracked(&service, &def, options(exactly_once, &job), cfg.elements, name)
                .await?;
            tracing::info!("exactly-once bench: {name} {:.0} elements/s", run.elements_per_s);
            runs.push(run);
        }
    }
    let summary = |name: &str| {
        let of = |f: fn(&TrackingRun) -> f64| {
            Spread::of(runs.iter().filter(|r| r.delivery == name).map(f).collect())
        };
        Tracking {
            elements_per_s: of(|r| r.elements_per_s),
            reader_us: of(|r| r.reader_us),
            workers_us: of(|r| r.workers_us),
            dispatcher_us: of(|r| r.dispatcher_us),
        }
    };
    let (at_most_once, exactly_once) = (summary("at-most-once"), summary("exactly-once"));
    drop(service);
    let (checkpoints, deterministic) = if cfg.tracking_only {
        let reason = "--exactly-once-tracking-only";
        (Outcome::Skipped { reason: reason.into() }, Outcome::Skipped { reason: reason.into() })
    } else {
        let service =
            Service::start(exe, WORKERS, ELEMENTS_PER_SPLIT, logs, "eo-checkpoint").await?;
        let checkpoints = Outcome::from_result(eo_checkpoint::run(&service).await);
        let deterministic =
            Outcome::from_result(crate::deterministic::run(&service, cfg.elements).await);
        (checkpoints, deterministic)
    };
    Ok(ExactlyOnceBench {
        elements: cfg.elements,
        elements_per_split: TRACKING_ELEMENTS_PER_SPLIT,
        at_most_once,
        exactly_once,
        runs,
        checkpoints,
        deterministic,
    })
}

/// CPU time so far of this process, the workers together and the dispatcher.
fn cpu(service: &Service) -> anyhow::Result<[Duration; 3]> {
    let mut workers = Duration::ZERO;
    for w in &service.workers {
        workers += cpu_time(&w.id().to_string())?;
    }
    Ok([cpu_time("self")?, workers, cpu_time(&service.dispatcher.id().to_string())?])
}

/// Reads `def` (`range(expected)`) to its end, checking that every value comes
/// once; elements/s from the first element to the last, CPU over the read.
async fn read_tracked(
    service: &Service,
    def: &DatasetDef,
    opts: ReadOptions,
    expected: u64,
    delivery: &str,
) -> anyhow::Result<TrackingRun> {
    let mut seen = vec![false; expected as usize];
    let before = cpu(service)?;
    let mut stream = service.client.distribute(def, opts).await?;
    let (mut n, mut first, mut last) = (0u64, None, Instant::now());
    let body = async {
        while let Some(e) = stream.next().await {
            let v = e?.as_i64()?;
            match seen.get_mut(v as usize) {
                Some(s) if !*s => *s = true,
                Some(_) => bail!("value {v} arrived twice in a DYNAMIC read"),
                None => bail!("value {v} is outside range({expected})"),
            }
            last = Instant::now();
            first.get_or_insert(last);
            n += 1;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(READ_TIMEOUT, body).await.context("read timed out")??;
    drop(stream);
    let after = cpu(service)?;
    if n != expected {
        bail!("read {n} elements of {expected}");
    }
    let span = last.duration_since(first.unwrap_or(last)).max(Duration::from_micros(1));
    let per = |i: usize| (after[i] - before[i]).as_secs_f64() * 1e6 / n as f64;
    Ok(TrackingRun {
        delivery: delivery.to_string(),
        elements_per_s: n as f64 / span.as_secs_f64(),
        reader_us: per(0),
        workers_us: per(1),
        dispatcher_us: per(2),
    })
}
