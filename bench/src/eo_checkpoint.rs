//! The exactly-once bench's positions and restore (docs/exactly-once.md,
//! "Positions"), on the service of [`crate::exactly_once`]:
//!
//! (b) **positions with 64 splits in flight**: an exactly-once read of
//!     `range(N)` through `shuffle(3200)` on each of the 2 workers: a worker's
//!     shuffle buffer holds elements of 32 splits of 100, so the reader consumes
//!     from about 64 splits at once and none of them is whole until the buffers
//!     drain. A position is taken every [`POSITION_EVERY`] elements through half
//!     the epoch; for each: its encoded size, the record ranges and units it
//!     holds above its watermark, the splits those units belong to (counted, not
//!     assumed) and the time `position()` took. Figures are over the positions
//!     taken once the buffers were full (after [`MIN_ELEMENTS`] elements).
//! (c) **restore**: the position at half the epoch, encoded and decoded as a
//!     trainer's checkpoint would be, restores a new reader: from the restoring
//!     `distribute` to its first element and to the end of the epoch, next to the
//!     fresh read's time to its first element and its rate. The two halves must
//!     make the epoch exactly once.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_dataset::DatasetDef;
use sluice_positions::Position;

use crate::exactly_once::{eo_options, Spread, ELEMENTS_PER_SPLIT};
use crate::service::Service;
use crate::streaming::{READ_TIMEOUT, WORKERS};

/// Splits the positions are measured with in flight.
pub const SPLITS_IN_FLIGHT: u64 = 64;
/// Elements between two positions.
pub const POSITION_EVERY: u64 = 1000;
/// Elements read before positions count: twice what the shuffle buffers hold.
pub const MIN_ELEMENTS: u64 = 2 * SPLITS_IN_FLIGHT * ELEMENTS_PER_SPLIT;
/// Each worker's shuffle buffer: its share of the splits in flight.
const SHUFFLE: u64 = SPLITS_IN_FLIGHT * ELEMENTS_PER_SPLIT / WORKERS as u64;

/// (b) and (c).
#[derive(Clone, Debug, Serialize)]
pub struct Checkpoints {
    pub shuffle_buffer: u64,
    /// Positions counted (taken after [`MIN_ELEMENTS`]).
    pub positions: u64,
    /// Over the counted positions: encoded bytes, record ranges and units held
    /// above the watermark, splits with records held, µs of `position()`.
    pub bytes: Spread,
    pub runs: Spread,
    pub units: Spread,
    pub splits: Spread,
    pub position_us: Spread,
    /// The fresh read of (b): `distribute` → first element, and its rate (with
    /// the positions taken).
    pub fresh_first_ms: f64,
    pub fresh_per_s: f64,
    /// (c): the position restored from, and the restored read.
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

pub async fn run(service: &Service, elements: u64) -> anyhow::Result<Checkpoints> {
    let def = shuffled(elements)?;
    let job = "eo-bench-positions";
    let start = Instant::now();
    let mut stream = service.client.distribute(&def, eo_options(job)).await?;
    let (mut order, mut taken, mut half) = (Vec::new(), Vec::new(), None);
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
            half = Some(bytes);
            covered = order.len();
        }
    }
    let first = first.context("no element read")?;
    let fresh_first_ms = (first - start).as_secs_f64() * 1e3;
    let fresh_per_s = order.len() as f64 / first.elapsed().as_secs_f64().max(1e-9);
    let bytes = half.context("no position taken")?;
    // What was consumed after the last position comes again.
    drop(stream);
    let position = Position::decode(&bytes).context("decoding the position just encoded")?;
    let t = Instant::now();
    let mut restored =
        service.client.distribute(&def, eo_options(job).restore(position)).await?;
    let (mut restore_first, mut restored_elements) = (None, 0u64);
    let mut all: BTreeSet<i64> = order[..covered].iter().copied().collect();
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
    let of = |f: fn(&Taken) -> f64| Spread::of(taken.iter().map(f).collect());
    Ok(Checkpoints {
        shuffle_buffer: SHUFFLE,
        positions: taken.len() as u64,
        bytes: of(|t| t.bytes as f64),
        runs: of(|t| t.runs as f64),
        units: of(|t| t.units as f64),
        splits: of(|t| t.splits as f64),
        position_us: of(|t| t.us),
        fresh_first_ms,
        fresh_per_s,
        restored_from_bytes: bytes.len(),
        restore_first_ms: restore_first.unwrap_or_default().as_secs_f64() * 1e3,
        restore_end_ms: restore_end.as_secs_f64() * 1e3,
        restored_elements,
    })
}

/// The time the fresh read would take for `elements` at its rate.
pub fn fresh_time(c: &Checkpoints, elements: u64) -> Duration {
    Duration::from_secs_f64(elements as f64 / c.fresh_per_s.max(1e-9))
}
