//! `sluice bench`: how fast the dispatcher commits splits, how long a leader failover
//! and a restart take, each printed next to the physical limit measured in the same
//! run (the local disk's fsync, an S3 PUT). Figures are reported, never asserted; the
//! run fails only when a section fails or a split is handed out twice (or lost).
//!
//! # Layout
//! ```text
//!  run ─► limits ──────────── loopback TCP and memcpy bandwidth (the limits of streaming)
//!      ─► streaming ─► service  OFF, 2 worker processes: scalars (CPU/element), 1 MiB elements
//!      ─► epoch ───► service  last element → end of stream, OFF and DYNAMIC
//!      ─► fsync ───────────── fsync and S3 PUT latency (the limits)
//!      ─► splits ─► driver ── (a) memory, (b) sled: in process; (c) 3×sled, (d) 3×S3: procs
//!      ─► splits ─► driver ── (c) again with --splits-per-request per GetSplit (grants)
//!      ─► failover ─► driver  SIGKILL the leader of (c) under load
//!      ─► gap ─► group+service SIGKILL the leader under a DYNAMIC reader: element gap;
//!                 then kill+restart cycles under a `sluice read` process (read_failover)
//!      ─► rss ───► service    VmRSS of an idle dispatcher and worker
//!      ─► restart ─► driver   1M splits on sled, SIGKILL, restart
//!      ─► files ──────────── file pipelines (TFRecord, text): local vs 1 and 2 workers
//!      ─► compression ─► proxy  token ids and random bytes through a capped link,
//!                 compression none vs zstd
//!      ─► exactly-once ─► service  DYNAMIC scalars at-most-once vs exactly-once
//!                 (CPU per element of every process); eo_checkpoint: positions with
//!                 64 splits in flight, restore to first element and to the end
//!      ─► scale ─────────── (only with --only scale) 3 nodes against N simulated
//!                 workers and M simulated consumers in this process
//!      ─► report ─────────── one table on stdout, the same figures as JSON
//! ```
//! - [`driver`] — fake workers ([`driver::Fleet`]) and the concurrent `GetSplit` loops
//!   ([`driver::drive`]), the exactly-once check.
//! - [`service`] — an in-memory dispatcher and `sluice worker` processes; groups of
//!   `sluice dispatcher` processes are `sluice_testkit::Quorum`s started as [`group`] says.
//!   Every child is `sluice_testkit`'s: killed and reaped on drop, killed by the kernel if
//!   the bench dies, every wait bounded. [`procstat`] — CPU time and RSS from `/proc`.
//! - [`proxy`] — a bandwidth-capped, byte-counting TCP proxy on loopback (a token
//!   bucket); [`compression`] reads through it.
//! - [`limits`], [`streaming`], [`epoch`], [`gap`], [`rss`] — the streaming-side
//!   measurements; [`read_failover`] — the gap section's kill and restart cycles as
//!   a `sluice read` process sees them.
//! - [`fsync`], [`splits`], [`failover`], [`restart`], [`files`] — one measurement each;
//!   each module defines the row type it measures.
//! - [`scale`] — the simulated fleet (workers, consumers) and its figures per size.
//! - [`measure`] — [`measure::Latency`] and [`measure::Outcome`], which every
//!   measurement returns (a leaf).
//! - [`report`] — [`report::Report`] gathers the rows and renders them, one
//!   function per section; [`machine`] — the header.
//!
//! Every process started here is killed and reaped when its guard drops (also on an
//! error, a panic, or Ctrl-C, which drops the whole run); every loop is bounded in
//! count and in time; only 127.0.0.1 is used.

pub mod compression;
pub mod deterministic;
pub mod driver;
pub mod eo_checkpoint;
pub mod eo_report;
pub mod epoch;
pub mod exactly_once;
pub mod failover;
pub mod files;
pub mod formats;
pub mod fsync;
pub mod gap;
pub mod group;
pub mod limits;
pub mod machine;
pub mod measure;
pub mod procstat;
pub mod proxy;
pub mod python;
pub mod read_failover;
pub mod report;
pub mod restart;
pub mod rss;
pub mod rss_specs;
pub mod scale;
pub mod service;
pub mod splits;
pub mod streaming;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context};
use sluice_journal::testing::MotoServer;

use crate::driver::Fleet;
use crate::report::{Machine, Outcome, Report};

/// The parts of a run, for `--skip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Limits,
    Streaming,
    Epoch,
    Grants,
    Gap,
    Rss,
    Fsync,
    Memory,
    Sled,
    Cluster,
    Failover,
    S3,
    Restart,
    Files,
    Python,
    Compression,
    ExactlyOnce,
    Parquet,
    WebDataset,
    Jpeg,
    /// Not in the default run (minutes): only when named in `--only`.
    Scale,
}

impl Section {
    /// Every section, for `--only`.
    pub const ALL: [Section; 21] = [
        Section::Limits,
        Section::Streaming,
        Section::Epoch,
        Section::Grants,
        Section::Gap,
        Section::Rss,
        Section::Fsync,
        Section::Memory,
        Section::Sled,
        Section::Cluster,
        Section::Failover,
        Section::S3,
        Section::Restart,
        Section::Files,
        Section::Python,
        Section::Compression,
        Section::ExactlyOnce,
        Section::Parquet,
        Section::WebDataset,
        Section::Jpeg,
        Section::Scale,
    ];
}

impl FromStr for Section {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "limits" => Section::Limits,
            "streaming" => Section::Streaming,
            "epoch" => Section::Epoch,
            "grants" => Section::Grants,
            "gap" => Section::Gap,
            "rss" => Section::Rss,
            "fsync" => Section::Fsync,
            "memory" => Section::Memory,
            "sled" => Section::Sled,
            "cluster" => Section::Cluster,
            "failover" => Section::Failover,
            "s3" => Section::S3,
            "restart" => Section::Restart,
            "files" => Section::Files,
            "python" => Section::Python,
            "compression" => Section::Compression,
            "exactly-once" => Section::ExactlyOnce,
            "parquet" => Section::Parquet,
            "webdataset" => Section::WebDataset,
            "jpeg" => Section::Jpeg,
            "scale" => Section::Scale,
            other => {
                return Err(format!(
                    "unknown section `{other}`; one of limits, streaming, epoch, fsync, memory, \
                     sled, cluster, grants, failover, gap, s3, restart, rss, files, python, \
                     compression, exactly-once, parquet, webdataset, jpeg, scale"
                ))
            }
        })
    }
}

#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The `sluice` executable, started as `sluice dispatcher` for process cases.
    pub sluice_exe: PathBuf,
    /// Concurrent split loops (fake workers).
    pub workers: usize,
    /// Source elements (= splits) of each rate case's dataset.
    pub elements: u64,
    /// Time budget of each rate case.
    pub duration: Duration,
    pub restart_splits: u64,
    /// Time bound of handing out `restart_splits`.
    pub restart_timeout: Duration,
    pub fsync_samples: usize,
    pub put_samples: usize,
    /// Log entries between snapshots for every dispatcher started; `None`: the
    /// dispatcher's default for the work_dir's kind.
    pub snapshot_every: Option<u64>,
    /// Parent of the bench's temp dir (work dirs, the fsync probe); default: the
    /// system temp dir.
    pub dir: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub skip: Vec<Section>,
    /// The TFRecord data set of the files section.
    pub files: files::FilesConfig,
    /// Sizes of the streaming, end-of-epoch and element-gap cases.
    pub stream: streaming::StreamConfig,
    /// `max_splits` of the batched-grant row (`--splits-per-request`).
    pub splits_per_request: u32,
    /// Keep the bench's temp dir (work dirs, dispatcher logs) instead of deleting it.
    pub keep: bool,
    /// The Python stages section's interpreter and sizes.
    pub python: python::PythonConfig,
    /// The compression section's size.
    pub compression: compression::CompressionConfig,
    /// The exactly-once section's size.
    pub exactly_once: exactly_once::ExactlyOnceConfig,
    /// The scale section's sizes and pacing.
    pub scale: scale::ScaleConfig,
    /// The parquet, webdataset and jpeg sections' data and the jpeg peer.
    pub formats: formats::FormatsConfig,
}

impl BenchConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.workers == 0 || self.workers > 1000 {
            bail!("--workers must be 1..=1000, got {}", self.workers);
        }
        if self.python.elements <= 0 {
            bail!("--python-elements must be at least 1, got {}", self.python.elements);
        }
        if self.elements == 0 || self.elements > i64::MAX as u64 {
            bail!("--elements must be at least 1");
        }
        if self.duration.is_zero() {
            bail!("--secs must be positive");
        }
        if self.restart_splits == 0 || self.restart_splits > 1_000_000_000 {
            bail!("--restart-splits must be 1..=1e9, got {}", self.restart_splits);
        }
        let max_grant = sluice_dispatcher::apply::MAX_SPLITS_PER_GRANT;
        if self.splits_per_request < 2 || self.splits_per_request > max_grant {
            bail!("--splits-per-request must be 2..={max_grant}, got {}", self.splits_per_request);
        }
        let s = &self.stream;
        if s.scalars == 0 || s.scalars > 100_000_000 || s.gap_elements < 100 {
            bail!("--stream-scalars must be 1..=1e8 and --gap-elements at least 100");
        }
        if s.gap_elements > 100_000_000 || s.mib_elements == 0 || s.mib_elements > 100_000 {
            bail!("--gap-elements must be at most 1e8, --stream-mib 1..=100000");
        }
        if s.epoch_runs == 0 || s.epoch_runs > 100 {
            bail!("--epoch-runs must be 1..=100");
        }
        if s.gap_kills > 200 {
            bail!("--gap-kills must be at most 200");
        }
        if self.runs(Section::Scale) {
            self.scale.validate()?;
        }
        if self.fsync_samples == 0 || self.put_samples == 0 || self.snapshot_every == Some(0) {
            bail!("--fsync-samples, --put-samples and --snapshot-every must be at least 1");
        }
        Ok(())
    }

    fn runs(&self, s: Section) -> bool {
        !self.skip.contains(&s)
    }
}

/// Runs every section not skipped, prints the table on stdout, writes the JSON if asked;
/// fails if a section failed or an exactly-once check found a violation.
pub async fn run(config: BenchConfig) -> anyhow::Result<()> {
    config.validate()?;
    let report = tokio::select! {
        r = measure(&config) => r?,
        _ = tokio::signal::ctrl_c() => bail!("interrupted: every process started was stopped"),
    };
    print!("{}", report.render());
    if let Some(path) = &config.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    let problems = report.problems();
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

const NOT_RUN: &str = "--skip";

fn skipped<T>() -> Outcome<T> {
    Outcome::Skipped { reason: NOT_RUN.into() }
}

fn failed<T>(error: &str) -> Outcome<T> {
    Outcome::Failed { error: error.into() }
}

async fn measure(cfg: &BenchConfig) -> anyhow::Result<Report> {
    let parent = cfg.dir.clone().unwrap_or_else(std::env::temp_dir);
    let temp = tempfile::Builder::new()
        .prefix("sluice-bench-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temp dir in {}", parent.display()))?;
    let dir = temp.path().to_path_buf();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut machine = Machine {
        date_utc: machine::utc_now(),
        nproc: machine::nproc(),
        cpu: machine::cpu(),
        kernel: machine::kernel(),
        load_start: machine::loadavg(),
        load_end: String::new(),
        build: if cfg!(debug_assertions) { "debug" } else { "release" }.into(),
        bench_dir: dir.display().to_string(),
        bench_dir_fs: machine::filesystem(&dir),
        workers: cfg.workers,
        elements: cfg.elements,
        budget_s: cfg.duration.as_secs_f64(),
        snapshot_every: cfg.snapshot_every,
    };
    if cfg!(debug_assertions) {
        tracing::warn!(
            "debug build: figures are not representative (cargo run --release -- bench)"
        );
    }

    // The files section sets its cases beside the loopback bandwidth, so it measures
    // the limits too.
    let (loopback, loopback_streams, memcpy) = if cfg.runs(Section::Limits)
        || cfg.runs(Section::Files)
        || cfg.runs(Section::Parquet)
        || cfg.runs(Section::WebDataset)
    {
        tracing::info!("--- loopback TCP and memcpy bandwidth");
        let probe = tokio::task::spawn_blocking(|| {
            let lo = limits::loopback_bandwidth(LIMIT_PROBE, 1);
            let streams = limits::loopback_bandwidth(LIMIT_PROBE, streaming::WORKERS);
            (lo, streams, limits::memcpy_bandwidth(LIMIT_PROBE))
        });
        let (lo, streams, mem) = probe.await?;
        (Outcome::from_result(lo), Outcome::from_result(streams), Outcome::from_result(mem))
    } else {
        (skipped(), skipped(), skipped())
    };

    let (streaming, epoch) = streaming_and_epoch(cfg, &logs).await;

    let fsync = if cfg.runs(Section::Fsync) {
        tracing::info!("--- fsync latency");
        let (d, n) = (dir.clone(), cfg.fsync_samples);
        let r = tokio::task::spawn_blocking(move || fsync::fsync_latency(&d, n)).await?;
        Outcome::from_result(r)
    } else {
        skipped()
    };
    let (sled_append_1, sled_append_batch) = if cfg.runs(Section::Fsync) {
        tracing::info!("--- sled journal append latency");
        let probe = |batch: usize| {
            let location = dir.join(format!("append-probe-{batch}"));
            let location = location.to_string_lossy().into_owned();
            async move {
                let opts = sluice_journal::OpenOptions::default();
                fsync::journal_append_latency(&location, &opts, batch, cfg.fsync_samples).await
            }
        };
        (Outcome::from_result(probe(1).await), Outcome::from_result(probe(cfg.workers).await))
    } else {
        (skipped(), skipped())
    };
    let sled_append = sled_append_1.measured().copied();
    let limit =
        |o: &Outcome<measure::Latency>, what: &'static str| o.measured().map(|l| (what, *l));

    let mut split_rows = vec![];
    let mut splits = vec![];
    let mut add = |name: &str, o| {
        split_rows.push(name.to_string());
        splits.push(o);
    };

    let name = "1 node, memory (in-process)";
    add(
        name,
        if cfg.runs(Section::Memory) {
            tracing::info!("--- (a) {name}");
            Outcome::from_result(
                splits::in_process(cfg, None)
                    .await
                    .map(|r| splits::row(name, "memory://", r, None, None)),
            )
        } else {
            skipped()
        },
    );

    let name = "1 node, sled (in-process)";
    add(
        name,
        if cfg.runs(Section::Sled) {
            tracing::info!("--- (b) {name}");
            let work_dir = dir.join("sled-one");
            Outcome::from_result(
                splits::in_process(cfg, Some(&work_dir))
                    .await
                    .map(|r| splits::row(name, "sled", r, limit(&fsync, "fsync"), sled_append)),
            )
        } else {
            skipped()
        },
    );

    let name = "3 nodes, sled (processes)";
    let grants_name = format!("3 nodes, sled, {} per request", cfg.splits_per_request);
    let (cluster_row, grants_row, failover) =
        if [Section::Cluster, Section::Grants, Section::Failover].iter().any(|s| cfg.runs(*s)) {
            tracing::info!("--- (c) {name}");
            let names = (name, grants_name.as_str());
            cluster_and_failover(cfg, &dir, &logs, names, limit(&fsync, "fsync"), sled_append).await
        } else {
            (skipped(), skipped(), skipped())
        };
    add(name, cluster_row);
    add(&grants_name, grants_row);

    let name = "3 nodes, S3/moto (processes)";
    let (s3_put, s3_row) = if cfg.runs(Section::S3) {
        tracing::info!("--- S3 PUT latency and (d) {name}");
        s3(cfg, &logs, name).await
    } else {
        (skipped(), skipped())
    };
    add(name, s3_row);

    let gap = if cfg.runs(Section::Gap) {
        tracing::info!("--- leader SIGKILL under a reader (element gap)");
        Outcome::from_result(gap::run(cfg, &dir, &logs).await)
    } else {
        skipped()
    };
    let gap_read = if cfg.runs(Section::Gap) && cfg.stream.gap_kills > 0 {
        let kills = cfg.stream.gap_kills;
        tracing::info!("--- {kills} leader SIGKILLs and restarts under `sluice read`");
        Outcome::from_result(read_failover::run(cfg, &dir, &logs).await)
    } else if cfg.runs(Section::Gap) {
        Outcome::Skipped { reason: "--gap-kills 0".into() }
    } else {
        skipped()
    };

    let rss = if cfg.runs(Section::Rss) {
        tracing::info!("--- idle RSS");
        Outcome::from_result(rss::run(&cfg.sluice_exe, &logs).await)
    } else {
        skipped()
    };
    let rss_specs = if cfg.runs(Section::Rss) {
        tracing::info!("--- dispatcher RSS per byte of dataset definitions");
        Outcome::from_result(rss_specs::run(&cfg.sluice_exe, &logs, &dir).await)
    } else {
        skipped()
    };

    let restart = if cfg.runs(Section::Restart) {
        tracing::info!("--- restart with {} splits journaled", cfg.restart_splits);
        Outcome::from_result(restart::run(cfg, &dir, &logs).await)
    } else {
        skipped()
    };

    let files = if cfg.runs(Section::Files) {
        tracing::info!("--- file pipelines");
        let gb = |o: &Outcome<limits::Bandwidth>| o.measured().map(|b| b.gb_per_s);
        let link =
            files::Loopback { one_stream: gb(&loopback), two_streams: gb(&loopback_streams) };
        Outcome::from_result(files::run(&cfg.sluice_exe, cfg.files, &dir, &logs, link).await)
    } else {
        skipped()
    };

    let gb = |o: &Outcome<limits::Bandwidth>| o.measured().map(|b| b.gb_per_s);
    let link = files::Loopback { one_stream: gb(&loopback), two_streams: gb(&loopback_streams) };
    let mb = |o: &Outcome<limits::Bandwidth>| o.measured().map(|b| b.gb_per_s * 1e3);
    let pipes = files
        .measured()
        .map(|f| files::Pipes { one: mb(&f.pipe_one), two: mb(&f.pipe_two) })
        .unwrap_or_default();
    let exe = &cfg.sluice_exe;
    let parquet = if cfg.runs(Section::Parquet) {
        tracing::info!("--- parquet: rows and batches, local and through the service");
        let run = formats::parquet(exe, &cfg.formats, &dir, &logs, link, pipes).await;
        Outcome::from_result(run)
    } else {
        skipped()
    };
    let webdataset = if cfg.runs(Section::WebDataset) {
        tracing::info!("--- webdataset: samples, local and through the service");
        let run = formats::webdataset(exe, &cfg.formats, &dir, &logs, link, pipes).await;
        Outcome::from_result(run)
    } else {
        skipped()
    };
    let jpeg = if cfg.runs(Section::Jpeg) {
        tracing::info!("--- jpeg: decode, crop, flip, normalize against Pillow");
        Outcome::from_result(formats::jpeg(exe, &cfg.formats, &dir, &logs).await)
    } else {
        skipped()
    };

    let python = if cfg.runs(Section::Python) {
        tracing::info!("--- Python stages");
        Outcome::from_result(python::run(cfg.python.clone()).await)
    } else {
        skipped()
    };

    let compression = if cfg.runs(Section::Compression) {
        tracing::info!("--- compression through a capped link");
        Outcome::from_result(compression::run(&cfg.sluice_exe, cfg.compression, &logs).await)
    } else {
        skipped()
    };

    let exactly_once = if cfg.runs(Section::ExactlyOnce) {
        tracing::info!("--- exactly-once: tracking, positions, restore");
        Outcome::from_result(exactly_once::run(&cfg.sluice_exe, cfg.exactly_once, &logs).await)
    } else {
        skipped()
    };

    let scale = if cfg.runs(Section::Scale) {
        tracing::info!("--- scale: simulated workers and consumers against 3 nodes");
        Outcome::Measured(scale::run(&cfg.sluice_exe, &cfg.scale, &dir, &logs).await)
    } else {
        Outcome::Skipped { reason: "not in the default run: --only scale".into() }
    };

    machine.load_end = machine::loadavg();
    if cfg.keep {
        let kept = temp.keep();
        tracing::info!("kept {} (work dirs; dispatcher logs in logs/)", kept.display());
    }
    Ok(Report {
        machine,
        loopback,
        loopback_streams,
        memcpy,
        streaming,
        epoch,
        gap,
        gap_read,
        rss,
        rss_specs,
        fsync,
        sled_append_1,
        sled_append_batch,
        s3_put,
        splits,
        split_rows,
        failover,
        restart,
        files,
        python,
        compression,
        exactly_once,
        parquet,
        webdataset,
        jpeg,
        scale,
    })
}

type Row = Outcome<splits::SplitCase>;

/// How long each bandwidth probe runs.
const LIMIT_PROBE: Duration = Duration::from_secs(1);

/// The streaming cases and the end-of-epoch runs, on one in-memory dispatcher process
/// and two worker processes.
async fn streaming_and_epoch(
    cfg: &BenchConfig,
    logs: &Path,
) -> (Vec<Outcome<streaming::StreamCase>>, Outcome<epoch::Epoch>) {
    let runs_streaming = cfg.runs(Section::Streaming);
    let runs_epoch = cfg.runs(Section::Epoch);
    let not_run = || if runs_streaming { None } else { Some(skipped()) };
    if !runs_streaming && !runs_epoch {
        return (vec![skipped(), skipped()], skipped());
    }
    tracing::info!("--- streaming, OFF, {} worker processes", streaming::WORKERS);
    let epoch_elements_per_split = 1000;
    let exe = &cfg.sluice_exe;
    let service = match service::Service::start(
        exe,
        streaming::WORKERS,
        epoch_elements_per_split,
        logs,
        "stream",
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            let error = format!("{e:#}");
            let rows = (0..2).map(|_| not_run().unwrap_or_else(|| failed(&error))).collect();
            return (rows, if runs_epoch { failed(&error) } else { skipped() });
        }
    };
    let mut rows = vec![];
    if runs_streaming {
        tracing::info!("--- streaming: int64 scalars");
        rows.push(Outcome::from_result(streaming::scalars(&service, cfg.stream.scalars).await));
        tracing::info!("--- streaming: 1 MiB elements");
        rows.push(Outcome::from_result(streaming::large(&service, cfg.stream.mib_elements).await));
    } else {
        rows = vec![skipped(), skipped()];
    }
    let epoch = if runs_epoch {
        tracing::info!("--- end of epoch");
        Outcome::from_result(epoch::run(&service, cfg.stream.epoch_runs).await)
    } else {
        skipped()
    };
    (rows, epoch)
}

/// (c), (c) with batched grants, and the failover on the same three sled processes.
async fn cluster_and_failover(
    cfg: &BenchConfig,
    dir: &Path,
    logs: &Path,
    (name, grants_name): (&str, &str),
    limit: Option<(&str, measure::Latency)>,
    append: Option<measure::Latency>,
) -> (Row, Row, Outcome<failover::Failover>) {
    let work_dir = dir.join("cluster");
    let started = async {
        let work_dir = work_dir.to_str().context("bench dir is not UTF-8")?;
        let group = splits::start_group(cfg, 3, work_dir, &[], logs).await?;
        let fleet = Fleet::register(group.addresses(), cfg.workers).await?;
        anyhow::Ok((group, fleet))
    };
    let (mut group, mut fleet) = match started.await {
        Ok(v) => v,
        Err(e) => {
            let error = format!("{e:#}");
            return (failed(&error), failed(&error), failed(&error));
        }
    };
    let row = if cfg.runs(Section::Cluster) {
        let r = splits::rate(&mut fleet, cfg.elements, cfg.duration, 1).await;
        Outcome::from_result(r.map(|r| splits::row(name, "sled", r, limit, append)))
    } else {
        skipped()
    };
    let grants = if cfg.runs(Section::Grants) {
        tracing::info!("--- {grants_name}");
        let n = cfg.splits_per_request;
        let r = splits::rate(&mut fleet, cfg.elements, cfg.duration, n).await;
        Outcome::from_result(r.map(|r| splits::row(grants_name, "sled", r, limit, append)))
    } else {
        skipped()
    };
    let failover = if cfg.runs(Section::Failover) {
        tracing::info!("--- leader failover");
        Outcome::from_result(failover::run(&mut group, &mut fleet, cfg).await)
    } else {
        skipped()
    };
    group.stop();
    (row, grants, failover)
}

/// The S3 PUT latency and (d), on one moto server; skipped loudly without moto.
async fn s3(cfg: &BenchConfig, logs: &Path, name: &str) -> (Outcome<measure::Latency>, Row) {
    let moto = match tokio::task::spawn_blocking(MotoServer::try_start).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => {
            tracing::warn!("no S3 server: {e}");
            let reason = "run scripts/install-s3-test-server.sh".to_string();
            return (Outcome::Skipped { reason: reason.clone() }, Outcome::Skipped { reason });
        }
        Err(e) => {
            let error = format!("starting moto: {e}");
            return (Outcome::Failed { error: error.clone() }, Outcome::Failed { error });
        }
    };
    let put = Outcome::from_result(fsync::s3_put_latency(&moto, cfg.put_samples).await);
    let limit = put.measured().map(|l| ("S3 PUT", *l));
    let row = async {
        let work_dir = format!("s3://{}/bench-cluster", moto.bucket());
        let mut group = splits::start_group(cfg, 3, &work_dir, &moto.env(), logs).await?;
        let mut fleet = Fleet::register(group.addresses(), cfg.workers).await?;
        let r = splits::rate(&mut fleet, cfg.elements, cfg.duration, 1).await;
        group.stop();
        r
    };
    let row = Outcome::from_result(
        row.await.map(|r| splits::row(name, "s3 (moto)", r, limit, limit.map(|(_, l)| l))),
    );
    // Stop moto off the runtime threads (its drop waits for the process).
    let _ = tokio::task::spawn_blocking(move || drop(moto)).await;
    (put, row)
}
