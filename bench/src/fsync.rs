//! The physical limits commits wait on: the local disk's fsync and an S3 PUT; and what
//! one durable write of the journal itself costs on top (sled: a batch and a flush).
//!
//! The probes mimic one durable journal write: the sled journal appends and flushes
//! (fsync) once per `append` call; the object-store journal PUTs one new object per
//! call, create-if-absent. A few first writes (file creation, connection set-up) are
//! not counted.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use object_store::{PutMode, PutOptions, PutPayload};
use sluice_journal::testing::MotoServer;
use sluice_journal::OpenOptions;

use crate::measure::Latency;

const BLOCK: usize = 4096;
const WARMUP: usize = 5;

/// Appends 4 KiB to a new file in `dir` and `sync_all`s it, `samples` times (blocking).
pub fn fsync_latency(dir: &Path, samples: usize) -> anyhow::Result<Latency> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0xa5u8; BLOCK];
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + WARMUP {
        let start = Instant::now();
        file.write_all(&block)?;
        file.sync_all().with_context(|| format!("fsync of {}", path.display()))?;
        if i >= WARMUP {
            times.push(start.elapsed());
        }
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Latency::of(times).context("no samples")
}

/// PUTs `samples` 4 KiB objects (create-if-absent, one at a time) to the moto server,
/// through the same object-store client the journal builds.
pub async fn s3_put_latency(moto: &MotoServer, samples: usize) -> anyhow::Result<Latency> {
    let location = format!("s3://{}/bench-put-probe", moto.bucket());
    let (store, root) = sluice_journal::testing::object_store_for(&location, &moto.options())?;
    let payload = PutPayload::from(vec![0xa5u8; BLOCK]);
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + WARMUP {
        let path = root.clone().join(format!("{i:06}"));
        let start = Instant::now();
        let put = store.put_opts(&path, payload.clone(), PutOptions::from(PutMode::Create));
        tokio::time::timeout(Duration::from_secs(30), put)
            .await
            .context("a PUT took over 30 s")?
            .with_context(|| format!("PUT {path}"))?;
        if i >= WARMUP {
            times.push(start.elapsed());
        }
    }
    Latency::of(times).context("no samples")
}

/// `samples` calls of the journal's own `append` with `batch` entries of 128 bytes
/// (about a GetSplit log entry) each, on a fresh journal at `location`.
pub async fn journal_append_latency(
    location: &str,
    options: &OpenOptions,
    batch: usize,
    samples: usize,
) -> anyhow::Result<Latency> {
    let (journal, _) = sluice_journal::open_with(location, options)
        .await
        .with_context(|| format!("opening a probe journal at {location}"))?;
    let entry = Bytes::from(vec![0x5au8; 128]);
    let mut next = 1u64;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples + WARMUP {
        let entries: Vec<(u64, Bytes)> =
            (0..batch as u64).map(|k| (next + k, entry.clone())).collect();
        next += batch as u64;
        let start = Instant::now();
        tokio::time::timeout(Duration::from_secs(30), journal.append(entries))
            .await
            .context("an append took over 30 s")??;
        if i >= WARMUP {
            times.push(start.elapsed());
        }
    }
    Latency::of(times).context("no samples")
}
