//! The exactly-once bench's positions and restore (docs/exactly-once.md,
//! "Positions"), on the service of [`crate::exactly_once`]:
//!
//! (b) **positions with 64 splits in flight**: an exactly-once read of
//!     `range(200000)` through `shuffle(3200)` on each of the 2 workers: a
//!     worker's shuffle buffer holds elements of 32 splits of 100, so the reader
//!     consumes from about 64 splits at once and none of them is whole until the
//!     buffers drain. A position is taken every [`POSITION_EVERY`] elements
//!     through half the epoch; for each: its encoded size, the record ranges and
//!     units it holds above its watermark, the splits those units belong to
//!     (counted, not assumed) and the time `position()` took. Figures are over
//!     the positions taken once the buffers were full (after [`MIN_ELEMENTS`]).
//!     Twice: at full speed, and paced as a trainer ([`STEP`] after each
//!     position). A position holds what was consumed above the last checkpoint
//!     watermark the dispatcher answered, so besides the units in flight it
//!     holds what the reader consumed during the last report's interval and
//!     round trip: at full speed that is most of it.
//! (c) **restore**: the paced read's position at half the epoch, encoded and
//!     decoded as a trainer's checkpoint would be, restores a new reader: from the restoring
//!     `distribute` to its first element and to the end of the epoch, next to the
//!     fresh read's time to its first element and its rate. The two halves must
//!     make the epoch exactly once.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{ProcessingMode, ReadOptions};
use sluice_dataset::DatasetDef;
use sluice_positions::Position;

use crate::measure::Spread;
use crate::service::Service;
use crate::streaming::{READ_TIMEOUT, WORKERS};
/// Source elements per split in (b) and (c): a split is 100 scalars, as a file
/// of a small record set would be.
pub const ELEMENTS_PER_SPLIT: u64 = 100;

/// Splits the positions are measured with in flight.
pub const SPLITS_IN_FLIGHT: u64 = 64;
/// Elements between two positions.
pub const POSITION_EVERY: u64 = 1000;
/// Elements read before positions count: twice what the shuffle buffers hold.
pub const MIN_ELEMENTS: u64 = 2 * SPLITS_IN_FLIGHT * ELEMENTS_PER_SPLIT;
/// `range(N)` of the positions' reads.
pub const ELEMENTS: u64 = 200_000;
/// The paced read's training step after each position: 1000 elements per
/// 100 ms, a trainer consuming 10,000 elements/s.
pub const STEP: Duration = Duration::from_millis(100);
/// Each worker's shuffle buffer: its share of the splits in flight.
const SHUFFLE: u64 = SPLITS_IN_FLIGHT * ELEMENTS_PER_SPLIT / WORKERS as u64;

/// What the positions of one read held.
#[derive(Clone, Debug, Serialize)]
pub struct Sizes {
    /// Positions counted (taken after [`MIN_ELEMENTS`]).
    pub positions: u64,
    /// Encoded bytes, record ranges and units held above the watermark, splits
    /// with records held, µs of `position()`.
    pub bytes: Spread,
    pub runs: Spread,
    pub units: Spread,
    pub splits: Spread,
    pub position_us: Spread,
}

/// (b) and (c).
#[derive(Clone, Debug, Serialize)]
pub struct Checkpoints {
    pub elements: u64,
    pub shuffle_buffer: u64,
    /// The paced read: a training step of this long after each position.
    pub step_ms: f64,
    pub paced: Sizes,
    pub paced_per_s: f64,
    /// The same read at full speed.
    pub full_speed: Sizes,
    pub full_speed_per_s: f64,
    /// The full-speed read's `distribute` → first element.
    pub fresh_first_ms: f64,
    /// (c): the position restored from (the paced read's at half the epoch),
    /// and the restored read.
    pub restored_from_bytes: usize,
    pub restore_first_ms: f64,
    pub restore_end_ms: f64,
    pub restored_elements: u64,
}

fn shuffled(n: u64) -> anyhow::Result<DatasetDef> {
    Ok(DatasetDef::from_json(&format!(
        r#"{{"stages": [{{"range": {{"stop": {n}}}}}, {{"shuffle": {{"buffer_size": {SHUFFLE}, "seed": 3}}}}]}}"#
    ))?)
}

/// What one position holds.
struct Taken {
    bytes: usize,
    runs: usize,
    units: usize,
    splits: usize,
    us: f64,
}

fn measure(p: &Position, us: f64, bytes: usize) -> Taken {
    let splits: HashSet<u64> = p.consumed.runs().map(|r| r.unit / ELEMENTS_PER_SPLIT).collect();
    Taken {
        bytes,
        runs: p.consumed.run_count(),
        units: p.consumed.units_held(),
        splits: splits.len(),
        us,
    }
}

/// One exactly-once read of `def` through half its `elements`, a position
/// every [`POSITION_EVERY`] elements, each followed by `step` (a training step).
struct Read {
    taken: Vec<Taken>,
    /// The values consumed, in order, and how many of them the last position covers.
    order: Vec<i64>,
    covered: usize,
    /// The last position, encoded.
    last: Vec<u8>,
    first_ms: f64,
    per_s: f64,
}

async fn read_positions(
    service: &Service,
    def: &DatasetDef,
    job: &str,
    elements: u64,
    step: Duration,
) -> anyhow::Result<Read> {
    let start = Instant::now();
    let mut stream = service.client.distribute(def, eo_options(job)).await?;
    let (mut order, mut taken, mut last) = (Vec::new(), Vec::new(), None);
    let (mut first, mut covered) = (None, 0usize);
    while (order.len() as u64) * 2 < elements {
        let e = tokio::time::timeout(READ_TIMEOUT, stream.next())
            .await
            .context("positions read timed out")?
            .context("the epoch ended early")??;
        first.get_or_insert_with(Instant::now);
        order.push(e.as_i64()?);
        if (order.len() as u64).is_multiple_of(POSITION_EVERY) {
            let t = Instant::now();
            let p = stream.position()?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            let bytes = p.encode();
            if order.len() as u64 >= MIN_ELEMENTS {
                taken.push(measure(&p, us, bytes.len()));
            }
            last = Some(bytes);
            covered = order.len();
            if !step.is_zero() {
                tokio::time::sleep(step).await;
            }
        }
    }
    let first = first.context("no element read")?;
    Ok(Read {
        taken,
        covered,
        last: last.context("no position taken")?,
        first_ms: (first - start).as_secs_f64() * 1e3,
        per_s: order.len() as f64 / first.elapsed().as_secs_f64().max(1e-9),
        order,
    })
}

fn sizes(taken: &[Taken]) -> Sizes {
    let of = |f: fn(&Taken) -> f64| Spread::of(taken.iter().map(f).collect());
    Sizes {
        positions: taken.len() as u64,
        bytes: of(|t| t.bytes as f64),
        runs: of(|t| t.runs as f64),
        units: of(|t| t.units as f64),
        splits: of(|t| t.splits as f64),
        position_us: of(|t| t.us),
    }
}

pub async fn run(service: &Service) -> anyhow::Result<Checkpoints> {
    let elements = ELEMENTS;
    let def = shuffled(elements)?;
    // At full speed first: what the reports' lag adds.
    let fast =
        read_positions(service, &def, "eo-bench-positions-fast", elements, Duration::ZERO).await?;
    let job = "eo-bench-positions";
    let read = read_positions(service, &def, job, elements, STEP).await?;
    let position = Position::decode(&read.last).context("decoding the position just encoded")?;
    let t = Instant::now();
    let mut restored = service.client.distribute(&def, eo_options(job).restore(position)).await?;
    let (mut restore_first, mut restored_elements) = (None, 0u64);
    let mut all: BTreeSet<i64> = read.order[..read.covered].iter().copied().collect();
    while let Some(e) = tokio::time::timeout(READ_TIMEOUT, restored.next())
        .await
        .context("restored read timed out")?
    {
        restore_first.get_or_insert_with(|| t.elapsed());
        restored_elements += 1;
        if !all.insert(e?.as_i64()?) {
            bail!("the restored reader got an element the position had consumed, or one twice");
        }
    }
    let restore_end = t.elapsed();
    if all.len() as u64 != elements {
        bail!("the position and the restored read make {} of {elements} elements", all.len());
    }
    Ok(Checkpoints {
        elements,
        shuffle_buffer: SHUFFLE,
        step_ms: STEP.as_secs_f64() * 1e3,
        paced: sizes(&read.taken),
        paced_per_s: read.per_s,
        full_speed: sizes(&fast.taken),
        full_speed_per_s: fast.per_s,
        fresh_first_ms: fast.first_ms,
        restored_from_bytes: read.last.len(),
        restore_first_ms: restore_first.unwrap_or_default().as_secs_f64() * 1e3,
        restore_end_ms: restore_end.as_secs_f64() * 1e3,
        restored_elements,
    })
}

/// The time the full-speed read would take for `elements` at its rate.
pub fn fresh_time(c: &Checkpoints, elements: u64) -> Duration {
    Duration::from_secs_f64(elements as f64 / c.full_speed_per_s.max(1e-9))
}

/// An exactly-once read of job `job`.
fn eo_options(job: &str) -> ReadOptions {
    ReadOptions::new(ProcessingMode::Dynamic).job_name(job).exactly_once(true)
}
