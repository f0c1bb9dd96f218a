//! Streaming in OFF mode through 2 worker processes, read one element at a time
//! through the client's `ElementStream` in this process:
//!
//! ```text
//!  sluice dispatcher (memory) ◄── heartbeats ── 2 × sluice worker ══ GetElements ══► bench (reader)
//! ```
//! (a) int64 scalars, `range(N)`: elements/s and CPU µs per element, of this process
//!     (the reader) and of the workers, from `/proc/<pid>/stat`;
//! (b) 1 MiB elements: GB/s, next to the loopback and memcpy bandwidth of
//!     [`crate::limits`]. No built-in map makes a float tensor, so an element is a
//!     1 MiB bytes scalar: `from_bytes([1 MiB]).repeat(K)` (the payload on the wire
//!     is the same size as a float32 tensor of 262,144 values).
//!
//! In OFF mode every worker produces the whole dataset, so the reader gets each
//! element once per worker: the check is that every value arrives exactly twice.
//! Rates run from the first element to the last (the time to the first element,
//! job creation and the workers starting their tasks, is not part of the rate).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{Client, ProcessingMode, ReadOptions};
use sluice_dataset::{DatasetDef, Element};

use crate::procstat::cpu_time;
use crate::service::Service;

/// The sizes of the streaming cases.
#[derive(Clone, Copy, Debug)]
pub struct StreamConfig {
    /// `range(N)` of the scalar case (each worker produces all N).
    pub scalars: u64,
    /// 1 MiB elements per worker of the large case.
    pub mib_elements: u64,
    /// Runs of each end-of-epoch case.
    pub epoch_runs: usize,
    /// `range(N)` of the leader-kill element-gap case.
    pub gap_elements: u64,
    /// Leader kill + restart cycles under a `sluice read` process (0: none).
    pub gap_kills: usize,
}

/// Bound of one read: a read that takes longer fails its section.
pub const READ_TIMEOUT: Duration = Duration::from_secs(120);

pub const WORKERS: usize = 2;
const MIB: usize = 1 << 20;

/// What one read through the client saw.
pub struct Reading {
    pub elements: u64,
    pub bytes: u64,
    /// From `distribute` to the first element.
    pub first: Duration,
    /// From the first element to the last.
    pub span: Duration,
    /// From the last element's arrival to the end of the stream (`None`).
    pub end_after_last: Duration,
}

/// Reads one iteration of `def` to its end (bounded by [`READ_TIMEOUT`]), calling
/// `check` on each element.
pub async fn read(
    client: &Client,
    def: &DatasetDef,
    mode: ProcessingMode,
    mut check: impl FnMut(&Element) -> anyhow::Result<()>,
) -> anyhow::Result<Reading> {
    let body = async {
        let start = Instant::now();
        let mut stream = client.distribute(def, ReadOptions::new(mode)).await?;
        let (mut elements, mut bytes, mut first, mut last) = (0u64, 0u64, None, None);
        while let Some(e) = stream.next().await {
            let now = Instant::now();
            let e = e?;
            first.get_or_insert(now);
            last = Some(now);
            elements += 1;
            bytes += e.byte_len() as u64;
            check(&e)?;
        }
        let end = Instant::now();
        let (first, last) = (first.unwrap_or(end), last.unwrap_or(end));
        anyhow::Ok(Reading {
            elements,
            bytes,
            first: first - start,
            span: last - first,
            end_after_last: end - last,
        })
    };
    tokio::time::timeout(READ_TIMEOUT, body)
        .await
        .with_context(|| format!("the read did not end within {READ_TIMEOUT:?}"))?
}

#[derive(Clone, Debug, Serialize)]
pub struct StreamCase {
    pub name: String,
    pub workers: usize,
    pub elements: u64,
    pub bytes: u64,
    /// From the first element to the last.
    pub secs: f64,
    pub elements_per_s: f64,
    pub gb_per_s: f64,
    /// CPU time (user + system) of this process over the read, per element.
    pub reader_cpu_us_per_element: f64,
    /// CPU time of the worker processes together over the read, per element.
    pub workers_cpu_us_per_element: f64,
    /// CPU seconds over the read: this process, the workers together.
    pub reader_cpu_s: f64,
    pub workers_cpu_s: f64,
    /// Every value arrived exactly once per worker.
    pub exactly_once: String,
}

impl StreamCase {
    pub fn ok(&self) -> bool {
        self.exactly_once == "ok"
    }
}

/// CPU time of this process and of the workers, read before and after a case.
struct Cpu {
    reader: Duration,
    workers: Duration,
}

fn cpu(service: &Service) -> anyhow::Result<Cpu> {
    let mut workers = Duration::ZERO;
    for w in &service.workers {
        workers += cpu_time(&w.id().to_string())?;
    }
    Ok(Cpu { reader: cpu_time("self")?, workers })
}

fn case(name: &str, r: &Reading, before: Cpu, after: Cpu, exactly_once: String) -> StreamCase {
    let secs = r.span.as_secs_f64().max(1e-9);
    let per = |d: Duration| d.as_secs_f64() * 1e6 / r.elements.max(1) as f64;
    let (reader, workers) = (after.reader - before.reader, after.workers - before.workers);
    StreamCase {
        name: name.into(),
        workers: WORKERS,
        elements: r.elements,
        bytes: r.bytes,
        secs,
        elements_per_s: r.elements as f64 / secs,
        gb_per_s: r.bytes as f64 / secs / 1e9,
        reader_cpu_us_per_element: per(reader),
        workers_cpu_us_per_element: per(workers),
        reader_cpu_s: reader.as_secs_f64(),
        workers_cpu_s: workers.as_secs_f64(),
        exactly_once,
    }
}

/// (a) `range(n)` in OFF mode, int64 scalars one at a time.
pub async fn scalars(service: &Service, n: u64) -> anyhow::Result<StreamCase> {
    let def = DatasetDef::range(i64::try_from(n).context("--stream-scalars")?);
    let mut seen = vec![0u8; n as usize];
    let before = cpu(service)?;
    let r = read(&service.client, &def, ProcessingMode::Off, |e| {
        let v = e.as_i64()?;
        match seen.get_mut(v as usize) {
            Some(c) => *c = c.saturating_add(1),
            None => bail!("value {v} is outside range({n})"),
        }
        Ok(())
    })
    .await?;
    let after = cpu(service)?;
    let wrong = seen.iter().filter(|c| **c as usize != WORKERS).count();
    let check = if wrong == 0 {
        "ok".to_string()
    } else {
        format!("VIOLATION: {wrong} of {n} values did not arrive exactly {WORKERS} times")
    };
    Ok(case(&format!("int64 scalars, range({n})"), &r, before, after, check))
}

/// (b) 1 MiB elements, `k` per worker.
pub async fn large(service: &Service, k: u64) -> anyhow::Result<StreamCase> {
    let def = DatasetDef::from_bytes(vec![vec![0x5a; MIB]]).repeat(k);
    let mut wrong = 0u64;
    let before = cpu(service)?;
    let r = read(&service.client, &def, ProcessingMode::Off, |e| {
        // A bytes tensor holds each item behind a 4-byte length.
        if e.byte_len() != MIB + 4 {
            wrong += 1;
        }
        Ok(())
    })
    .await?;
    let after = cpu(service)?;
    let expected = k * WORKERS as u64;
    let check = if wrong == 0 && r.elements == expected {
        "ok".to_string()
    } else {
        format!("VIOLATION: {} elements ({expected} expected), {wrong} not of 1 MiB", r.elements)
    };
    Ok(case(&format!("1 MiB bytes, {k} per worker"), &r, before, after, check))
}
