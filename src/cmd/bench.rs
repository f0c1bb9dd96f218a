//! `sluice bench`: streaming rates, the dispatcher's committed split rate, end of
//! epoch, leader failover, restart time and idle memory, next to the loopback,
//! memcpy, fsync and S3 PUT figures measured in the same run. Flags only;
//! the measurements live in `sluice-bench`. See docs/performance.md.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_bench::{BenchConfig, Section};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Concurrent split loops (fake workers) per case.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Source elements (one split each) of every rate case's dataset; a case ends at
    /// the end of its splits or after --secs, whichever comes first.
    #[arg(long, default_value_t = 1_000_000)]
    pub elements: u64,
    /// Time budget of each rate case, in seconds.
    #[arg(long, default_value_t = 4.0)]
    pub secs: f64,
    /// Splits journaled before the restart is measured.
    #[arg(long, default_value_t = 1_000_000)]
    pub restart_splits: u64,
    /// Give up handing out --restart-splits after this many seconds (reported loudly).
    #[arg(long, default_value_t = 900)]
    pub restart_timeout_secs: u64,
    /// fsync samples (append 4 KiB + sync_all).
    #[arg(long, default_value_t = 200)]
    pub fsync_samples: usize,
    /// S3 PUT samples (4 KiB objects to the moto server).
    #[arg(long, default_value_t = 100)]
    pub put_samples: usize,
    /// Log entries between snapshots, for every dispatcher started. Default: the
    /// dispatcher's (10000 on local disk and in memory, 1000 on object storage),
    /// except in the scale section: 1000, so that every size takes snapshots.
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// Where to create the bench's temp dir (work dirs, the fsync probe): put it on the
    /// disk the work dirs will use. Default: the system temp dir.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Sections to skip, comma-separated: limits, streaming, epoch, fsync, memory, sled,
    /// cluster, grants, failover, gap, s3, restart, rss, files, python, compression,
    /// exactly-once, parquet, webdataset, jpeg, scale (scale runs only when named in
    /// --only: it takes minutes).
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<Section>,
    /// Run only these sections (comma-separated, the names of --skip), e.g.
    /// `--only compression`.
    #[arg(long, value_delimiter = ',', conflicts_with = "skip", env = "SLUICE_BENCH_ONLY")]
    pub only: Vec<Section>,
    /// Payload MB read per case of the compression section.
    #[arg(long, default_value_t = 64, env = "SLUICE_BENCH_COMPRESSION_MB")]
    pub compression_mb: u64,
    /// Source elements of each tracking read of the exactly-once section (its
    /// positions and restore read range(200000)).
    #[arg(long, default_value_t = 2_000_000)]
    pub exactly_once_elements: u64,
    /// Run only the exactly-once section's tracking part (a), not its positions,
    /// restore and deterministic parts (to profile or repeat the tracking cost).
    #[arg(long)]
    pub exactly_once_tracking_only: bool,
    /// TFRecord files of the files section's sample data set.
    #[arg(long, default_value_t = 64)]
    pub sample_files: usize,
    /// Records per file of the sample data set.
    #[arg(long, default_value_t = 256)]
    pub sample_records_per_file: usize,
    /// Width and height of the sample images, in pixels.
    #[arg(long, default_value_t = 64)]
    pub sample_image_size: u32,
    /// `max_splits` per `GetSplit` of the batched-grant row on three sled nodes.
    #[arg(long, default_value_t = 64)]
    pub splits_per_request: u32,
    /// `range(N)` of the streaming scalar case (each of the 2 workers produces all N).
    #[arg(long, default_value_t = 1_000_000)]
    pub stream_scalars: u64,
    /// 1 MiB elements per worker of the streaming large-element case (4096: about
    /// 2.5 s at 3.5 GB/s, long enough to be steady).
    #[arg(long, default_value_t = 4096)]
    pub stream_mib: u64,
    /// Reads of each end-of-epoch case (OFF, DYNAMIC).
    #[arg(long, default_value_t = 5)]
    pub epoch_runs: usize,
    /// `range(N)` read under DYNAMIC while the leader is SIGKILLed (element gap).
    #[arg(long, default_value_t = 200_000)]
    pub gap_elements: u64,
    /// Leader SIGKILL + restart cycles under a `sluice read` process in the gap
    /// section (0: none).
    #[arg(long, default_value_t = 20)]
    pub gap_kills: usize,
    /// Keep the bench's temp dir (work dirs, dispatcher logs) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
    /// The interpreter of the Python stages section (it needs numpy).
    #[arg(long, default_value = "python3", value_name = "PATH")]
    pub python: PathBuf,
    /// The interpreter with Pillow and numpy that the jpeg section measures
    /// against (`bash scripts/install-bench-venv.sh` makes one and prints its path).
    #[arg(long, default_value = "python3", value_name = "PATH")]
    pub pillow_python: PathBuf,
    /// Elements through each pipeline of the Python stages section.
    #[arg(long, default_value_t = 200_000)]
    pub python_elements: i64,
    /// Sizes of the scale section: N simulated workers and N simulated consumers
    /// against three dispatcher processes, one run per size.
    #[arg(long, value_delimiter = ',', default_value = "100,500,2000")]
    pub scale_sizes: Vec<usize>,
    /// Steady window of each scale size, in seconds (a workers-only window of a
    /// third of it comes first).
    #[arg(long, default_value_t = 20.0)]
    pub scale_secs: f64,
    /// Consumers per job in the scale section (each job is one iteration with a
    /// task on every worker).
    #[arg(long, default_value_t = 10)]
    pub scale_consumers_per_job: usize,
    /// Milliseconds between two GetSplits of one simulated worker.
    #[arg(long, default_value_t = 1000)]
    pub scale_split_interval_ms: u64,
    /// Give up a scale size whose registration, joining or task hand-out takes
    /// longer than this many seconds (reported as where it broke).
    #[arg(long, default_value_t = 180)]
    pub scale_setup_timeout_secs: u64,
}

pub async fn run(a: BenchArgs) -> anyhow::Result<()> {
    let config = BenchConfig {
        sluice_exe: std::env::current_exe().context("locating the sluice executable")?,
        workers: a.workers,
        elements: a.elements,
        duration: Duration::try_from_secs_f64(a.secs).context("--secs")?,
        restart_splits: a.restart_splits,
        restart_timeout: Duration::from_secs(a.restart_timeout_secs),
        fsync_samples: a.fsync_samples,
        put_samples: a.put_samples,
        snapshot_every: a.snapshot_every,
        dir: a.dir,
        json: a.json,
        // The scale section takes minutes: only when named in --only.
        skip: if a.only.is_empty() {
            a.skip.into_iter().chain([Section::Scale]).collect()
        } else {
            Section::ALL.into_iter().filter(|s| !a.only.contains(s)).collect()
        },
        files: sluice_bench::files::FilesConfig {
            files: a.sample_files,
            records_per_file: a.sample_records_per_file,
            image_size: a.sample_image_size,
        },
        stream: sluice_bench::streaming::StreamConfig {
            scalars: a.stream_scalars,
            mib_elements: a.stream_mib,
            epoch_runs: a.epoch_runs,
            gap_elements: a.gap_elements,
            gap_kills: a.gap_kills,
        },
        splits_per_request: a.splits_per_request,
        keep: a.keep,
        python: sluice_bench::python::PythonConfig {
            python: a.python,
            elements: a.python_elements,
        },
        compression: sluice_bench::compression::CompressionConfig { mb: a.compression_mb },
        exactly_once: sluice_bench::exactly_once::ExactlyOnceConfig {
            elements: a.exactly_once_elements,
            tracking_only: a.exactly_once_tracking_only,
        },
        scale: sluice_bench::scale::ScaleConfig {
            sizes: a.scale_sizes,
            duration: Duration::try_from_secs_f64(a.scale_secs).context("--scale-secs")?,
            consumers_per_job: a.scale_consumers_per_job,
            split_interval: Duration::from_millis(a.scale_split_interval_ms),
            setup_timeout: Duration::from_secs(a.scale_setup_timeout_secs),
            // Small enough that every size takes snapshots; --snapshot-every wins.
            snapshot_every: a.snapshot_every.unwrap_or(1000),
        },
        formats: sluice_bench::formats::FormatsConfig {
            pillow_python: a.pillow_python,
            ..Default::default()
        },
    };
    sluice_bench::run(config).await
}
