//! The cost of the deterministic order (docs/exactly-once.md, "Deterministic
//! order"), in the exactly-once section's service: `range(N)` int64 scalars read
//! to the end by two consumers side by side, in the default exactly-once mode
//! and in a deterministic order (seed 1, two consumers), alternately
//! ([`RUNS`] each, the median kept). Elements/s of both consumers together, from
//! the first element to the last. Each run is checked: every element once.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{ProcessingMode, ReadOptions};
use sluice_dataset::DatasetDef;

use crate::service::Service;
use crate::streaming::READ_TIMEOUT;

/// Runs of each mode.
pub const RUNS: usize = 3;

#[derive(Clone, Debug, Serialize)]
pub struct DeterministicBench {
    /// Median elements/s of the default exactly-once reads (two consumers).
    pub exactly_once_per_s: f64,
    /// Median elements/s of the deterministic-order reads (two consumers).
    pub deterministic_per_s: f64,
    /// Every run's rate, in the order run: (mode, elements/s).
    pub runs: Vec<(String, f64)>,
}

impl DeterministicBench {
    /// What the order costs, in percent of the default exactly-once rate.
    pub fn cost_percent(&self) -> f64 {
        100.0 * (1.0 - self.deterministic_per_s / self.exactly_once_per_s.max(1e-9))
    }
}

fn options(job: &str, consumer: Option<u32>) -> ReadOptions {
    let o = ReadOptions::new(ProcessingMode::Dynamic).job_name(job).exactly_once(true);
    match consumer {
        Some(i) => o.deterministic(1, 2, i),
        None => o,
    }
}

pub async fn run(service: &Service, elements: u64) -> anyhow::Result<DeterministicBench> {
    let def = DatasetDef::range(elements as i64);
    let id = service.client.register_dataset(&def, None).await?;
    let mut runs = vec![];
    for i in 0..RUNS {
        for ordered in [false, true] {
            let name = if ordered { "deterministic" } else { "exactly-once" };
            let job = format!("det-bench-{i}-{name}");
            let rate = read_two(service, &id, &job, ordered, elements).await?;
            tracing::info!("deterministic bench: {name} {rate:.0} elements/s");
            runs.push((name.to_string(), rate));
        }
    }
    let median = |name: &str| {
        let mut r: Vec<f64> = runs.iter().filter(|(n, _)| n == name).map(|(_, r)| *r).collect();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    };
    Ok(DeterministicBench {
        exactly_once_per_s: median("exactly-once"),
        deterministic_per_s: median("deterministic"),
        runs,
    })
}

/// Two consumers of `job` read to the end together; elements/s of both.
async fn read_two(
    service: &Service,
    id: &str,
    job: &str,
    ordered: bool,
    expected: u64,
) -> anyhow::Result<f64> {
    let consumer = |i: u32| options(job, ordered.then_some(i));
    let a = service.client.from_dataset_id(id, consumer(0)).await?;
    let b = service.client.from_dataset_id(id, consumer(1)).await?;
    let drain = |mut s: sluice_client::ElementStream| async move {
        let (mut seen, mut first, mut last) = (Vec::new(), None, Instant::now());
        while let Some(e) = s.next().await {
            seen.push(e?.as_i64()?);
            last = Instant::now();
            first.get_or_insert(last);
        }
        anyhow::Ok((seen, first, last))
    };
    let both = async { tokio::try_join!(drain(a), drain(b)) };
    let ((sa, fa, la), (sb, fb, lb)) =
        tokio::time::timeout(READ_TIMEOUT, both).await.context("read timed out")??;
    let mut all: Vec<i64> = [sa, sb].concat();
    all.sort_unstable();
    all.dedup();
    if all.len() as u64 != expected {
        bail!("{job}: {} distinct elements of {expected}", all.len());
    }
    let first = [fa, fb].into_iter().flatten().min().context("no element")?;
    let span = la.max(lb).duration_since(first).max(Duration::from_micros(1));
    Ok(expected as f64 / span.as_secs_f64())
}
