//! `sluice sample-data`: writes a small image data set as TFRecord files or
//! WebDataset tar shards, or text rows as Parquet files (what a real training
//! input looks like) and the pipeline
//! spec that reads it, so that `sluice local --spec` can run a realistic job. The
//! writing lives in `sluice_dataset::sample`.

use anyhow::Context;
use clap::{Args, ValueEnum};

/// The file format of the sample data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// TFRecord files of tf.train.Examples (a PNG `image`, an int64 `label`).
    Tfrecord,
    /// WebDataset tar shards: `NNNNNN.jpg` (JPEGs of varying sizes) and
    /// `NNNNNN.cls` (the label) per sample.
    Webdataset,
    /// Parquet files of text rows: `id`, `text`, `label`, `tokens` (a list of
    /// int32), in several row groups per file.
    Parquet,
}

#[derive(Args, Debug)]
pub struct SampleArgs {
    /// Directory or bucket prefix to write to (a path, file://, s3:// or gs://).
    #[arg(long)]
    pub out: String,
    /// The file format: TFRecord files, WebDataset tar shards or Parquet files.
    #[arg(long, value_enum, default_value_t = Format::Tfrecord)]
    pub format: Format,
    /// Number of files (TFRecord files, tar shards or Parquet files).
    #[arg(long, default_value_t = 64)]
    pub files: usize,
    /// Records (tf.train.Example: PNG `image`, int64 `label`; or WebDataset
    /// samples: `jpg`, `cls`; or Parquet rows) per file.
    #[arg(long, default_value_t = 64)]
    pub records_per_file: usize,
    /// Width and height of the square RGB images, in pixels (WebDataset JPEGs
    /// vary between half and one and a half times it).
    #[arg(long, default_value_t = 64)]
    pub image_size: u32,
    /// Parquet only: rows per row group (the split unit). Default: a quarter of
    /// --records-per-file, so that each file has four row groups.
    #[arg(long)]
    pub rows_per_group: Option<usize>,
    /// Seed of the pseudo-random image content and labels.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where to write the pipeline spec (JSON). Default: `pipeline.json` inside
    /// --out when it is a local directory, else stdout.
    #[arg(long)]
    pub spec: Option<String>,
}

pub async fn run(a: SampleArgs) -> anyhow::Result<()> {
    if a.files == 0 || a.records_per_file == 0 || a.image_size < 16 {
        anyhow::bail!(
            "--files and --records-per-file must be at least 1, --image-size at least 16"
        );
    }
    let out = a.out.trim_end_matches('/').to_string();
    let (files, records, size, seed) = (a.files, a.records_per_file, a.image_size, a.seed);
    let started = std::time::Instant::now();
    let target = out.clone();
    let format = a.format;
    let group = a.rows_per_group.unwrap_or(records / 4).max(1);
    let summary = tokio::task::spawn_blocking(move || match format {
        Format::Tfrecord => {
            sluice_dataset::sample::write_image_dataset(&target, files, records, size, seed)
        }
        Format::Webdataset => {
            sluice_dataset::sample::write_webdataset(&target, files, records, size, seed)
        }
        Format::Parquet => {
            sluice_dataset::sample::write_parquet(&target, files, records, group, seed)
        }
    })
    .await??;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "wrote {} records in {} files, {:.1} MB, to {out} in {secs:.1} s",
        summary.records,
        summary.files.len(),
        summary.bytes as f64 / 1e6
    );
    let json = match format {
        Format::Tfrecord => {
            sluice_dataset::sample::image_pipeline(&format!("{out}/*.tfrecord"), size)
        }
        Format::Webdataset => sluice_dataset::sample::webdataset_pipeline(&format!("{out}/*.tar")),
        Format::Parquet => sluice_dataset::sample::parquet_pipeline(&format!("{out}/*.parquet")),
    }
    .to_json();
    let is_local = !out.contains("://") || out.starts_with("file://");
    let spec = a.spec.or_else(|| {
        is_local.then(|| {
            let dir = out.strip_prefix("file://").unwrap_or(&out);
            format!("{dir}/pipeline.json")
        })
    });
    match spec {
        Some(path) => {
            std::fs::write(&path, json + "\n").with_context(|| format!("writing {path}"))?;
            eprintln!("pipeline spec: {path}");
            eprintln!("run it:        sluice local --spec {path} --quiet");
        }
        None => println!("{json}"),
    }
    Ok(())
}
