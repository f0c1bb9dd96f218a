//! What exactly-once costs (docs/exactly-once.md), on one in-memory dispatcher and
//! 2 worker processes, read by this process:
//!
//! (a) **tracking**: DYNAMIC `range(N)` int64 scalars read to the end, at-most-once
//!     and exactly-once alternately ([`RUNS`] each, the median kept): elements/s and
//!     the cost of the origins, the reports and the consumed set; next to the
//!     in-memory dispatcher's split grants, which bound both;
//! (b) **positions**: a position taken every [`POSITION_EVERY`] elements of an
//!     exactly-once read of `range(N)` through a shuffle of 64 units: its encoded
//!     size, the units it holds above its watermark, and the time `position()` took;
//! (c) **restore**: a reader restored from the position taken at half the epoch:
//!     from the restoring call to its first element, and the elements it read
//!     (each checked: the two halves make the epoch exactly once);
//! (d) **deterministic order**: two consumers, default vs deterministic
//!     (`deterministic.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{ProcessingMode, ReadOptions};
use sluice_dataset::DatasetDef;

use crate::service::Service;
use crate::streaming::{READ_TIMEOUT, WORKERS};

/// Runs of each delivery in (a).
pub const RUNS: usize = 3;
/// Elements between two positions in (b).
pub const POSITION_EVERY: u64 = 1000;
/// Source elements per split: a split is 100 scalars, as a file of a small
/// record set would be; the split grants then are not the bound of (a).
const ELEMENTS_PER_SPLIT: u64 = 100;

#[derive(Clone, Copy, Debug)]
pub struct ExactlyOnceConfig {
    /// `range(N)` of every read.
    pub elements: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExactlyOnceBench {
    pub elements: u64,
    pub elements_per_split: u64,
    /// Median elements/s of the at-most-once reads.
    pub at_most_once_per_s: f64,
    /// Median elements/s of the exactly-once reads.
    pub exactly_once_per_s: f64,
    /// Every run's rate, in the order run: (delivery, elements/s).
    pub runs: Vec<(String, f64)>,
    /// (b): positions taken, the largest encoded size and its units held.
    pub positions: u64,
    pub max_position_bytes: usize,
    pub max_units_held: usize,
    pub max_position_us: u128,
    /// (c): restore to first element, ms; elements the restored reader read.
    pub restore_first_ms: f64,
    pub restored_elements: u64,
    /// (d): the deterministic order's rate next to the default's (`deterministic.rs`).
    pub deterministic: crate::deterministic::DeterministicBench,
}

impl ExactlyOnceBench {
    /// The cost of exactly-once tracking, in percent of the at-most-once rate.
    pub fn overhead_percent(&self) -> f64 {
        100.0 * (1.0 - self.exactly_once_per_s / self.at_most_once_per_s.max(1e-9))
    }
}

fn scalars(n: u64) -> DatasetDef {
    DatasetDef::range(n as i64)
}

fn shuffled(n: u64) -> anyhow::Result<DatasetDef> {
    Ok(DatasetDef::from_json(&format!(
        r#"{{"stages": [{{"range": {{"stop": {n}}}}}, {{"shuffle": {{"buffer_size": 64, "seed": 3}}}}]}}"#
    ))?)
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
    if cfg.elements < 2 * POSITION_EVERY || cfg.elements > 100_000_000 {
        bail!("--exactly-once-elements must be {}..=100000000", 2 * POSITION_EVERY);
    }
    let service = Service::start(exe, WORKERS, ELEMENTS_PER_SPLIT, logs, "exactly-once").await?;
    let def = scalars(cfg.elements);
    let mut runs = vec![];
    for i in 0..RUNS {
        for exactly_once in [false, true] {
            let job = format!("eo-bench-{i}-{exactly_once}");
            let rate = read_rate(&service, &def, options(exactly_once, &job), cfg.elements).await?;
            let name = if exactly_once { "exactly-once" } else { "at-most-once" };
            tracing::info!("exactly-once bench: {name} {rate:.0} elements/s");
            runs.push((name.to_string(), rate));
        }
    }
    let median = |name: &str| {
        let mut r: Vec<f64> = runs.iter().filter(|(n, _)| n == name).map(|(_, r)| *r).collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    let (at_most_once_per_s, exactly_once_per_s) = (median("at-most-once"), median("exactly-once"));

    // (b) and (c): positions through half the epoch, then a restored reader.
    let def = shuffled(cfg.elements)?;
    let mut stream = service.client.distribute(&def, options(true, "eo-bench-positions")).await?;
    let (mut order, mut positions) = (Vec::new(), 0u64);
    let (mut max_bytes, mut max_units, mut max_us) = (0usize, 0usize, 0u128);
    let (mut half, mut covered) = (None, 0usize);
    while order.len() as u64 * 2 < cfg.elements {
        let e = tokio::time::timeout(READ_TIMEOUT, stream.next())
            .await
            .context("positions read timed out")?
            .context("the epoch ended early")??;
        order.push(e.as_i64()?);
        if (order.len() as u64).is_multiple_of(POSITION_EVERY) {
            let t = Instant::now();
            let p = stream.position()?;
            max_us = max_us.max(t.elapsed().as_micros());
            let bytes = p.encode();
            positions += 1;
            max_bytes = max_bytes.max(bytes.len());
            max_units = max_units.max(p.consumed.units_held());
            half = Some(p);
            covered = order.len();
        }
    }
    let position = half.context("no position taken")?;
    // Keep only what the position covers: what was consumed after it comes again.
    drop(stream);
    let t = Instant::now();
    let mut restored = service
        .client
        .distribute(&def, options(true, "eo-bench-positions").restore(position))
        .await?;
    let mut first = None;
    let mut restored_elements = 0u64;
    let mut all: BTreeSet<i64> = order[..covered].iter().copied().collect();
    while let Some(e) = tokio::time::timeout(READ_TIMEOUT, restored.next())
        .await
        .context("restored read timed out")?
    {
        first.get_or_insert_with(|| t.elapsed());
        restored_elements += 1;
        if !all.insert(e?.as_i64()?) {
            bail!("the restored reader got an element the position had consumed, or one twice");
        }
    }
    if all.len() as u64 != cfg.elements {
        bail!("the position and the restored read make {} of {} elements", all.len(), cfg.elements);
    }
    let deterministic = crate::deterministic::run(&service, cfg.elements).await?;
    Ok(ExactlyOnceBench {
        elements: cfg.elements,
        elements_per_split: ELEMENTS_PER_SPLIT,
        at_most_once_per_s,
        exactly_once_per_s,
        runs,
        positions,
        max_position_bytes: max_bytes,
        max_units_held: max_units,
        max_position_us: max_us,
        restore_first_ms: first.unwrap_or_default().as_secs_f64() * 1e3,
        restored_elements,
        deterministic,
    })
}

/// Reads `def` to its end; elements/s from the first element to the last.
async fn read_rate(
    service: &Service,
    def: &DatasetDef,
    opts: ReadOptions,
    expected: u64,
) -> anyhow::Result<f64> {
    let mut stream = service.client.distribute(def, opts).await?;
    let (mut n, mut first, mut last) = (0u64, None, Instant::now());
    let body = async {
        while let Some(e) = stream.next().await {
            e?;
            last = Instant::now();
            first.get_or_insert(last);
            n += 1;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(READ_TIMEOUT, body).await.context("read timed out")??;
    if n != expected {
        bail!("read {n} elements of {expected}");
    }
    let span = last.duration_since(first.unwrap_or(last)).max(Duration::from_micros(1));
    Ok(n as f64 / span.as_secs_f64())
}
