//! The training formats: Parquet rows, WebDataset samples, and the JPEG work of
//! an ImageNet-style pipeline — each beside what limits it in the same run.
//!
//! - `parquet` and `webdataset`: the sample writers' files read locally by the
//!   same executor in this process (the "local" row, the same crates doing the
//!   same work), then through the service with one and two worker processes
//!   (`files::compare`: each service row says records/s over local, and worker
//!   CPU per record beside the pipe probe of the files section's run).
//! - `jpeg`: (a) per core: decode, `random_resized_crop` to 224², `random_flip`,
//!   `normalize` to CHW float32 on one thread of this process, against the same
//!   work by Pillow (libjpeg-turbo, `draft` DCT scaling allowed) and numpy in one
//!   Python thread (`bench/pillow_baseline.py`); (b) the pipeline from WebDataset
//!   shards to batches of [`BATCH`] at a trainer, through the service with 2 workers,
//!   against a `multiprocessing` pool of 2 processes doing the Pillow work and a
//!   trainer stacking batches (what `DataLoader(num_workers=2)` does), on the same
//!   2 cores.
//!
//! The Python peer runs with the interpreter given (`--pillow-python`; see
//! scripts/install-bench-venv.sh); without Pillow there the peer rows say so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use sluice_dataset::formats::parquet::ParquetSource;
use sluice_dataset::sample::SampleSummary;
use sluice_dataset::{Arg, DatasetDef, Stage};

use crate::files::{self, FilesCase, Loopback, Pipes};
use crate::measure::Outcome;

#[derive(Clone, Debug)]
pub struct FormatsConfig {
    pub parquet_files: usize,
    pub parquet_rows_per_file: usize,
    pub parquet_group_rows: usize,
    pub wds_files: usize,
    pub wds_samples_per_file: usize,
    pub wds_image_size: u32,
    /// JPEGs of the jpeg section (sides ~ImageNet's: 250 to 750 pixels).
    pub jpeg_images: usize,
    pub jpeg_image_size: u32,
    /// The interpreter with Pillow and numpy for the jpeg section's peer.
    pub pillow_python: PathBuf,
}

impl Default for FormatsConfig {
    fn default() -> Self {
        FormatsConfig {
            parquet_files: 8,
            parquet_rows_per_file: 50_000,
            parquet_group_rows: 10_000,
            wds_files: 8,
            wds_samples_per_file: 500,
            wds_image_size: 64,
            jpeg_images: 1024,
            jpeg_image_size: 500,
            pillow_python: PathBuf::from("python3"),
        }
    }
}

/// Images per batch at the trainer in the jpeg section: 64 of 3 × 224² float32
/// are 38.5 MB; 256 (154 MB) would be over the 64 MiB bound on a message
/// (`MAX_MESSAGE_BYTES`), so a trainer wanting 256 takes four.
pub const BATCH: u64 = 64;

/// A section's rows (local, 1 worker, 2 workers per pipeline) and its data set.
#[derive(Clone, Debug, Serialize)]
pub struct FormatRows {
    pub data: String,
    pub cases: Vec<FilesCase>,
}

/// A peer's rate.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rate {
    pub images_per_s: f64,
}

/// The jpeg section's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Jpeg {
    pub images: usize,
    pub data: String,
    /// Sluice's maps on one thread: images per CPU second of this process.
    pub sluice_per_core: f64,
    /// Pillow + numpy in one Python thread: images per CPU second, with `draft`
    /// (DCT-domain downscaling) where the crop allows it.
    pub pillow_per_core: Outcome<Rate>,
    /// The same without `draft`: every JPEG decoded at full size, as Sluice does.
    pub pillow_full_decode_per_core: Outcome<Rate>,
    /// Batches of [`BATCH`] at a trainer, service with 2 workers: images/s.
    pub sluice_two_workers: f64,
    /// CPU of the two workers per image, µs.
    pub sluice_worker_cpu_us: f64,
    /// A pool of 2 Pillow processes feeding a trainer: images/s.
    pub pillow_pool_two: Outcome<Rate>,
    /// The peer's library versions, as it printed them.
    pub peer: Option<String>,
}

fn utf8(p: &Path) -> anyhow::Result<String> {
    Ok(p.to_str().context("bench dir is not UTF-8")?.to_string())
}

/// Writes a section's files into `dir/data/<name>` with `write(out_dir)` off the
/// runtime's threads: the directory (the workers' data root) and what was written.
async fn written(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&str) -> Result<SampleSummary, sluice_dataset::DatasetError> + Send + 'static,
) -> anyhow::Result<(String, SampleSummary)> {
    let data = utf8(&dir.join("data").join(name))?;
    let out = data.clone();
    let summary = tokio::task::spawn_blocking(move || write(&out)).await??;
    Ok((data, summary))
}

pub async fn parquet(
    exe: &Path,
    cfg: &FormatsConfig,
    dir: &Path,
    logs: &Path,
    loopback: Loopback,
    pipes: Pipes,
) -> anyhow::Result<FormatRows> {
    let c = cfg.clone();
    let (data, s) = written(dir, "parquet", move |out| {
        let (files, rows, group) = (c.parquet_files, c.parquet_rows_per_file, c.parquet_group_rows);
        sluice_dataset::sample::write_parquet(out, files, rows, group, 1)
    })
    .await?;
    let rows = ParquetSource::new(s.files.clone());
    // Batches stack each column: the ragged `tokens` lists are left out.
    let columns = vec!["id".into(), "text".into(), "label".into()];
    let batches = ParquetSource { batch_rows: Some(1024), columns, ..rows.clone() };
    let mut cases = vec![];
    for (name, source) in [("parquet rows", rows), ("parquet 1024-row batches", batches)] {
        let def = DatasetDef { stages: vec![Stage::Parquet(source)] };
        cases.extend(files::compare(exe, name, &def, &data, logs, loopback, pipes).await?);
    }
    Ok(FormatRows {
        data: format!(
            "{} files, {} rows (id, text of 3-40 words, label, 1-64 int32 tokens), {} rows per \
             row group, zstd, {:.1} MB",
            s.files.len(),
            s.records,
            cfg.parquet_group_rows,
            s.bytes as f64 / 1e6
        ),
        cases,
    })
}

pub async fn webdataset(
    exe: &Path,
    cfg: &FormatsConfig,
    dir: &Path,
    logs: &Path,
    loopback: Loopback,
    pipes: Pipes,
) -> anyhow::Result<FormatRows> {
    let c = cfg.clone();
    let (data, s) = written(dir, "wds", move |out| {
        let (files, samples, size) = (c.wds_files, c.wds_samples_per_file, c.wds_image_size);
        sluice_dataset::sample::write_webdataset(out, files, samples, size, 1)
    })
    .await?;
    let def = DatasetDef::webdataset(s.files.clone());
    let cases =
        files::compare(exe, "webdataset samples", &def, &data, logs, loopback, pipes).await?;
    Ok(FormatRows {
        data: format!(
            "{} tar shards, {} samples (a JPEG of {}-{} px a side and a label), {:.1} MB",
            s.files.len(),
            s.records,
            cfg.wds_image_size / 2,
            cfg.wds_image_size * 3 / 2,
            s.bytes as f64 / 1e6
        ),
        cases,
    })
}

/// decode → random_resized_crop 224 → random_flip → normalize (ImageNet's mean
/// and std, CHW), `parallel` calls of the decode (1: one thread).
fn image_maps(def: DatasetDef, parallel: u32) -> DatasetDef {
    let s = |v: &str| Arg::Str(v.into());
    let f = Arg::Float;
    def.parallel_map("decode_jpeg", vec![s("jpg"), Arg::Int(3)], parallel)
        .map_with("random_resized_crop", vec![s("jpg"), Arg::Int(224), Arg::Int(224), Arg::Int(17)])
        .map_with("random_flip", vec![s("jpg"), Arg::Int(17)])
        .map_with(
            "normalize",
            vec![s("jpg"), f(0.485), f(0.456), f(0.406), f(0.229), f(0.224), f(0.225), s("chw")],
        )
}

/// Runs the peer script; its JSON line.
async fn peer(python: &Path, args: Vec<String>) -> anyhow::Result<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("pillow_baseline.py");
    let out = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(python).arg(&script).args(args).kill_on_drop(true).output(),
    )
    .await
    .context("the Pillow peer did not finish within 10 minutes")?
    .with_context(|| format!("running {}", python.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} {}: {}; install the peer with scripts/install-bench-venv.sh and pass \
             --pillow-python",
            python.display(),
            script.display(),
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("failed")
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

pub async fn jpeg(
    exe: &Path,
    cfg: &FormatsConfig,
    dir: &Path,
    logs: &Path,
) -> anyhow::Result<Jpeg> {
    let c = cfg.clone();
    let (data, s) = written(dir, "jpeg", move |out| {
        let per_shard = 64;
        let shards = c.jpeg_images.div_ceil(per_shard);
        sluice_dataset::sample::write_webdataset(out, shards, per_shard, c.jpeg_image_size, 1)
    })
    .await?;
    let listing = dir.join("data").join("jpeg-shards.txt");
    std::fs::write(&listing, s.files.join("\n"))?;
    let listing = utf8(&listing)?;

    tracing::info!("--- jpeg: Sluice's maps on one thread");
    let one = image_maps(DatasetDef::webdataset(s.files.clone()), 1);
    let (images, _, cpu) = files::local_rate(&one).await?;
    let sluice_per_core = images as f64 / cpu.as_secs_f64().max(1e-9);

    tracing::info!("--- jpeg: Pillow on one thread");
    let single = peer(&cfg.pillow_python, vec!["single".into(), listing.clone()]).await;
    let versions = |v: &serde_json::Value| format!("Pillow {}, numpy {}", v["pillow"], v["numpy"]);
    let peer_versions = single.as_ref().ok().map(versions);
    let per_cpu_second = |v: anyhow::Result<serde_json::Value>| {
        Outcome::from_result(v.and_then(|v| {
            let n = v["images"].as_f64().context("images")?;
            Ok(Rate { images_per_s: n / v["cpu_s"].as_f64().context("cpu_s")?.max(1e-9) })
        }))
    };
    let pillow_per_core = per_cpu_second(single);
    let full = peer(&cfg.pillow_python, vec!["single-full".into(), listing.clone()]).await;
    let pillow_full_decode_per_core = per_cpu_second(full);

    tracing::info!("--- jpeg: batches of {BATCH} through the service, 2 workers");
    let batched = image_maps(DatasetDef::webdataset(s.files.clone()), 0).batch(BATCH, false);
    let (n, secs, worker_cpu) = files::service_rate(exe, &batched, 2, &data, logs).await?;
    if n != s.records {
        anyhow::bail!("the jpeg pipeline delivered {n} images of {}", s.records);
    }
    tracing::info!("--- jpeg: a pool of 2 Pillow processes");
    let args = vec!["pool".into(), listing, "2".into(), BATCH.to_string()];
    let pool = peer(&cfg.pillow_python, args).await;
    let pillow_pool_two = Outcome::from_result(pool.and_then(|v| {
        let n = v["images"].as_f64().context("images")?;
        Ok(Rate { images_per_s: n / v["wall_s"].as_f64().context("wall_s")?.max(1e-9) })
    }));
    Ok(Jpeg {
        images: s.records as usize,
        data: format!(
            "{} JPEGs of {}-{} px a side (quality 90) in {} tar shards, {:.1} MB",
            s.records,
            cfg.jpeg_image_size / 2,
            cfg.jpeg_image_size * 3 / 2,
            s.files.len(),
            s.bytes as f64 / 1e6
        ),
        sluice_per_core,
        pillow_per_core,
        pillow_full_decode_per_core,
        sluice_two_workers: n as f64 / secs.max(1e-9),
        sluice_worker_cpu_us: worker_cpu.as_secs_f64() * 1e6 / n.max(1) as f64,
        pillow_pool_two,
        peer: peer_versions,
    })
}
