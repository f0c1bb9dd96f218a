//! Element compression over a capped link: one `sluice worker` process behind a
//! [`Proxy`] on loopback (the worker advertises the proxy, so every element
//! crosses it), read by this process with `compression` none and zstd, with the
//! proxy capped at 1 Gbit/s, 10 Gbit/s and uncapped:
//!
//! ```text
//!  sluice dispatcher ◄── heartbeats ── sluice worker ══► proxy (cap, counts) ══► bench (reader)
//! ```
//! (a) token ids: int32 rows of 2048 ids from a Zipf-like vocabulary of 32k with
//!     repeated phrases (a tokenizer's output; zstd shrinks it about 2x);
//! (b) random bytes: rows of 16 KiB (incompressible: the worker should send them
//!     raw and lose next to nothing).
//! Each row: elements/s and payload MB/s next to the cap (the physical limit, in
//! the same run), the bytes on the wire (so the ratio), and the CPU seconds of
//! the worker and of this reader over the read (the codec's cost is the
//! difference between the zstd row and the none row).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{Compression, ProcessingMode, ReadOptions};
use sluice_dataset::{DatasetDef, SliceValues, Tensor};
use sluice_testkit::Port;

use crate::procstat::cpu_time;
use crate::proxy::{Cap, Proxy};
use crate::service::{start_workers, wait_registered, Service};
use crate::streaming::READ_TIMEOUT;

/// Ids per token row (a sequence of a language model's context).
const TOKENS_PER_ROW: usize = 2048;
const TOKEN_ROWS: usize = 256;
const RANDOM_ROW_BYTES: usize = 16 * 1024;
const RANDOM_ROWS: usize = 64;

/// The size of the section.
#[derive(Clone, Copy, Debug)]
pub struct CompressionConfig {
    /// Payload MB read per case.
    pub mb: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompressionCase {
    pub data: String,
    /// `1 Gbit/s`, `10 Gbit/s` or `uncapped`.
    pub link: String,
    /// The cap in MB/s (`None` uncapped).
    pub cap_mb_per_s: Option<f64>,
    pub compression: String,
    pub elements: u64,
    /// Tensor bytes delivered.
    pub payload_bytes: u64,
    /// Bytes that crossed the proxy to the reader.
    pub wire_bytes: u64,
    pub secs: f64,
    pub elements_per_s: f64,
    /// Payload MB/s (what the trainer gets).
    pub mb_per_s: f64,
    /// payload / wire.
    pub ratio: f64,
    pub worker_cpu_s: f64,
    pub reader_cpu_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompressionBench {
    pub mb: u64,
    pub cases: Vec<CompressionCase>,
}

/// Deterministic xorshift.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `n` incompressible bytes (xorshift, seeded).
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| rng.next() as u8).collect()
}

/// Zipf-like ids (id ≈ 32000^u, u uniform) with a tenth of them starting a
/// repeat of an earlier 3..10-id phrase, as text repeats itself.
pub fn token_ids(n: usize) -> Vec<i32> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out: Vec<i32> = Vec::with_capacity(n);
    while out.len() < n {
        if out.len() > 64 && rng.next().is_multiple_of(10) {
            let len = 3 + (rng.next() % 8) as usize;
            let at = rng.next() as usize % (out.len() - len);
            for i in 0..len {
                out.push(out[at + i]);
            }
        } else {
            let u = (rng.next() % 1_000_000) as f64 / 1e6;
            out.push((32000f64.powf(u) as i32).min(31999));
        }
    }
    out.truncate(n);
    out
}

fn datasets(mb: u64) -> anyhow::Result<Vec<(&'static str, DatasetDef, u64)>> {
    let ids = token_ids(TOKEN_ROWS * TOKENS_PER_ROW);
    let tokens = Tensor::from_i32s(vec![TOKEN_ROWS as u64, TOKENS_PER_ROW as u64], &ids)?;
    let token_pass = (TOKEN_ROWS * TOKENS_PER_ROW * 4) as u64;
    let random = random_bytes(RANDOM_ROWS * RANDOM_ROW_BYTES, 7);
    let random = Tensor::from_u8s(vec![RANDOM_ROWS as u64, RANDOM_ROW_BYTES as u64], random)?;
    let random_pass = (RANDOM_ROWS * RANDOM_ROW_BYTES) as u64;
    let passes = |per: u64| (mb * 1_000_000).div_ceil(per).max(1);
    let slices = |t: Tensor| SliceValues::Tensors { tensors: vec![t], names: None };
    Ok(vec![
        (
            "token ids (int32)",
            DatasetDef::from_tensor_slices(slices(tokens)).repeat(passes(token_pass)),
            TOKEN_ROWS as u64 * passes(token_pass),
        ),
        (
            "random bytes",
            DatasetDef::from_tensor_slices(slices(random)).repeat(passes(random_pass)),
            RANDOM_ROWS as u64 * passes(random_pass),
        ),
    ])
}

/// Runs the section: its own dispatcher, one worker behind the proxy.
pub async fn run(
    exe: &std::path::Path,
    cfg: CompressionConfig,
    logs: &std::path::Path,
) -> anyhow::Result<CompressionBench> {
    if cfg.mb == 0 || cfg.mb > 100_000 {
        bail!("--compression-mb must be 1..=100000, got {}", cfg.mb);
    }
    let service = Service::start(exe, 0, 1, logs, "compression").await?;
    let port = Port::reserve()?;
    let upstream = port.address().parse().context("worker address")?;
    let proxy = Proxy::start(upstream, Cap::UNCAPPED).await?;
    let extra = ["--port".to_string(), port.number().to_string()];
    let extra = [&extra[..], &["--advertise".to_string(), proxy.address().to_string()]].concat();
    drop(port); // the worker binds it next
    let workers = start_workers(exe, &service.addresses, 1, &extra, logs, "compression").await?;
    wait_registered(&service.client, 1).await?;
    let worker_pid = workers[0].id().to_string();
    let links =
        [("1 Gbit/s", Cap::gbit(1.0)), ("10 Gbit/s", Cap::gbit(10.0)), ("uncapped", Cap::UNCAPPED)];
    let mut cases = vec![];
    for (data, def, expected) in datasets(cfg.mb)? {
        for (link, cap) in links {
            proxy.set_cap(cap);
            for compression in [Compression::None, Compression::Zstd] {
                tracing::info!("--- compression: {data}, {link}, {compression}");
                let case = read(&service, &proxy, &worker_pid, &def, compression, expected).await?;
                cases.push(CompressionCase {
                    data: data.into(),
                    link: link.into(),
                    cap_mb_per_s: cap.bytes_per_s().map(|b| b / 1e6),
                    compression: compression.to_string(),
                    ..case
                });
            }
        }
    }
    drop(workers);
    Ok(CompressionBench { mb: cfg.mb, cases })
}

/// One read of `def` to its end; fails if it did not deliver `expected` elements.
async fn read(
    service: &Service,
    proxy: &Proxy,
    worker_pid: &str,
    def: &DatasetDef,
    compression: Compression,
    expected: u64,
) -> anyhow::Result<CompressionCase> {
    let (wire0, worker0, reader0) = (proxy.to_reader(), cpu_time(worker_pid)?, cpu_time("self")?);
    let body = async {
        let opts = ReadOptions::new(ProcessingMode::Off).compression(compression);
        let mut stream = service.client.distribute(def, opts).await?;
        let (mut elements, mut bytes, mut first) = (0u64, 0u64, None);
        while let Some(e) = stream.next().await {
            let e = e?;
            first.get_or_insert_with(Instant::now);
            elements += 1;
            bytes += e.components.iter().map(|t| t.data().len() as u64).sum::<u64>();
        }
        let secs = first.map_or(Duration::ZERO, |f: Instant| f.elapsed()).as_secs_f64().max(1e-9);
        anyhow::Ok((elements, bytes, secs))
    };
    let (elements, payload_bytes, secs) = tokio::time::timeout(READ_TIMEOUT, body)
        .await
        .with_context(|| format!("the read did not end within {READ_TIMEOUT:?}"))??;
    if elements != expected {
        bail!("the read delivered {elements} elements, not {expected}");
    }
    let wire_bytes = proxy.to_reader() - wire0;
    Ok(CompressionCase {
        data: String::new(),
        link: String::new(),
        cap_mb_per_s: None,
        compression: String::new(),
        elements,
        payload_bytes,
        wire_bytes,
        secs,
        elements_per_s: elements as f64 / secs,
        mb_per_s: payload_bytes as f64 / secs / 1e6,
        ratio: payload_bytes as f64 / wire_bytes.max(1) as f64,
        worker_cpu_s: (cpu_time(worker_pid)? - worker0).as_secs_f64(),
        reader_cpu_s: (cpu_time("self")? - reader0).as_secs_f64(),
    })
}
