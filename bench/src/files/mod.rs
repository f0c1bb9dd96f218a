//! Real input pipelines over files: records/s and MB/s read locally with no
//! service (the baseline: the same executor in this process), and through the
//! service with one and with two `sluice worker` processes sharing the files under
//! DYNAMIC sharding (a split is a file).
//!
//! Two data sets: the sample of `sluice sample-data` (`sluice_dataset::sample`),
//! TFRecord files of `tf.train.Example`s holding a PNG image and a label, and text
//! files of sentences ([`text`]). Four pipelines run over them: the raw records
//! (`list_files` → `interleave(tfrecord)`) and the text lines (`interleave(text_lines)`),
//! which measure reading and moving bytes; the parsed Examples (raw records →
//! `parse_example`), which adds the parse; and the image preprocessing of the demo
//! (parse, decode PNG, crop, normalise, batch), which measures CPU work. The files
//! are written just before they are read, so every case reads them from the page
//! cache: the figures compare Sluice against the same work done locally, not disks.
//!
//! Each service case is also set beside its **limit**: the lower of the local read
//! and the loopback TCP bandwidth of as many streams as workers, both measured in
//! the same run; and beside the **pipe**: the TFRecord files read and sent over as
//! many loopback connections by plain threads ([`crate::limits::files_over_loopback`]),
//! which, unlike the limit, pays for the file read and both socket copies on the same
//! cores. The CPU time of the workers and of the reader (this process) per record says
//! where a case that misses them spends.

pub mod text;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use serde::Serialize;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, Element, FunctionRegistry, Stage};
use sluice_testkit::{Child, Port, START_TIMEOUT};

use crate::limits::{files_over_loopback, Bandwidth};
use crate::measure::Outcome;
use crate::procstat::cpu_time;

/// The sample data set's shape.
#[derive(Clone, Copy, Debug)]
pub struct FilesConfig {
    pub files: usize,
    pub records_per_file: usize,
    pub image_size: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct FilesCase {
    pub pipeline: String,
    pub setup: String,
    /// Records (images, lines) delivered; a batch counts its batch size.
    pub records: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// From the read request (job creation, task start on the workers) to the first
    /// element.
    pub first_element_s: f64,
    /// From the first element to the end of the stream: what the rates divide by.
    pub secs: f64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    /// records/s over the local baseline's of the same pipeline.
    pub vs_local: Option<f64>,
    /// The lower of the local read's MB/s and the loopback bandwidth of as many
    /// streams as workers (service cases, when the loopback was measured).
    pub limit_mb_per_s: Option<f64>,
    /// MB/s over `limit_mb_per_s`.
    pub vs_limit: Option<f64>,
    /// The TFRecord files sent over as many loopback streams as workers, MB/s (service
    /// cases, when it was measured).
    pub pipe_mb_per_s: Option<f64>,
    /// MB/s over `pipe_mb_per_s`.
    pub vs_pipe: Option<f64>,
    /// CPU time of the worker processes per record (service cases).
    pub worker_cpu_us_per_record: Option<f64>,
    /// CPU time of this process (the reader, or the local executor) per record.
    pub reader_cpu_us_per_record: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Files {
    pub files: usize,
    pub records: u64,
    pub dataset_bytes: u64,
    pub image_size: u32,
    pub text_files: usize,
    pub text_lines: u64,
    pub text_bytes: u64,
    /// The TFRecord files sent over 1 and over 2 loopback streams at once.
    pub pipe_one: Outcome<Bandwidth>,
    pub pipe_two: Outcome<Bandwidth>,
    pub cases: Vec<FilesCase>,
}

/// Loopback TCP bandwidth measured in the same run, GB/s, by number of streams.
#[derive(Clone, Copy, Debug, Default)]
pub struct Loopback {
    pub one_stream: Option<f64>,
    pub two_streams: Option<f64>,
}

/// Counts what a stream delivered, and when.
struct Tally {
    records: u64,
    bytes: u64,
    start: Instant,
    first: Option<Instant>,
}

impl Tally {
    fn new() -> Tally {
        Tally { records: 0, bytes: 0, start: Instant::now(), first: None }
    }

    fn done(self, worker_cpu: Option<Duration>, reader_cpu: Duration) -> Measured {
        let first = self.first.unwrap_or(self.start);
        Measured {
            records: self.records,
            bytes: self.bytes,
            first_element_s: (first - self.start).as_secs_f64(),
            secs: first.elapsed().as_secs_f64(),
            worker_cpu,
            reader_cpu,
        }
    }

    fn add(&mut self, e: &Element) {
        self.first.get_or_insert_with(Instant::now);
        // A raw record is one scalar; a preprocessed element is a batch of (image,
        // label) whose first dimension is its number of records.
        self.records += match e.components.as_slice() {
            [_] => 1,
            [first, ..] => first.shape().first().copied().unwrap_or(1),
            [] => 0,
        };
        self.bytes += e.byte_len() as u64;
    }
}

/// The files of `pattern` read by the dataset function `reader` (`tfrecord`,
/// `text_lines`): `interleave`, cycle 4, block 16, 4 threads.
fn read_pipeline(pattern: &str, reader: &str) -> DatasetDef {
    let mut def = DatasetDef::list_files(pattern);
    def.stages.push(Stage::Interleave {
        name: reader.into(),
        args: vec![],
        cycle_length: 4,
        block_length: 16,
        num_parallel_calls: 4,
    });
    def
}

fn parsed_pipeline(pattern: &str) -> DatasetDef {
    let scalar = |name: &str, dtype| sluice_dataset::FeatureSpec {
        name: name.into(),
        dtype,
        shape: Some(vec![]),
        default: None,
    };
    read_pipeline(pattern, "tfrecord").parse_example(vec![
        scalar("image", sluice_dataset::DType::Bytes),
        scalar("label", sluice_dataset::DType::Int64),
    ])
}

/// How long each pipe probe sends, after its warm-up.
const PIPE: Duration = Duration::from_secs(1);

/// Lines per text file, per TFRecord record of a file: about as many bytes of
/// text as a third of the records' (a line is ~130 bytes).
const LINES_PER_RECORD: usize = 32;

pub async fn run(
    exe: &Path,
    cfg: FilesConfig,
    dir: &Path,
    logs: &Path,
    loopback: Loopback,
) -> anyhow::Result<Files> {
    let data = dir.join("data");
    let tfrecords = data.join("tfrecords");
    let tfrecords = tfrecords.to_str().context("bench dir is not UTF-8")?.to_string();
    let (target, c) = (tfrecords.clone(), cfg);
    tracing::info!(files = cfg.files, records_per_file = cfg.records_per_file, "writing");
    let summary = tokio::task::spawn_blocking(move || {
        sluice_dataset::sample::write_image_dataset(
            &target,
            c.files,
            c.records_per_file,
            c.image_size,
            1,
        )
    })
    .await??;
    let text_dir = data.join("text");
    let (target, lines) = (text_dir.clone(), cfg.records_per_file * LINES_PER_RECORD);
    let text =
        tokio::task::spawn_blocking(move || text::write(&target, c.files, lines, 1)).await??;
    let paths: Vec<PathBuf> = summary.files.iter().map(PathBuf::from).collect();
    tracing::info!("--- files: TFRecord files over loopback, 1 and 2 streams");
    let (pipe_one, pipe_two) = tokio::task::spawn_blocking(move || {
        let pipe = |streams| Outcome::from_result(files_over_loopback(&paths, PIPE, streams));
        (pipe(1), pipe(2))
    })
    .await?;
    let records = format!("{tfrecords}/*.tfrecord");
    let lines = format!("{}/*.txt", text_dir.to_str().context("bench dir is not UTF-8")?);
    let pipelines = [
        ("raw records", read_pipeline(&records, "tfrecord")),
        ("text lines", read_pipeline(&lines, "text_lines")),
        ("parsed Examples", parsed_pipeline(&records)),
        ("image preprocessing", sluice_dataset::sample::image_pipeline(&records, cfg.image_size)),
    ];
    let roots = data.to_str().context("bench dir is not UTF-8")?;
    let pipes = Pipes {
        one: pipe_one.measured().map(|b| b.gb_per_s * 1e3),
        two: pipe_two.measured().map(|b| b.gb_per_s * 1e3),
    };
    let mut cases = vec![];
    for (name, def) in pipelines {
        cases.extend(compare(exe, name, &def, roots, logs, loopback, pipes).await?);
    }
    Ok(Files {
        files: summary.files.len(),
        records: summary.records,
        dataset_bytes: summary.bytes,
        image_size: cfg.image_size,
        text_files: text.files,
        text_lines: text.lines,
        text_bytes: text.bytes,
        pipe_one,
        pipe_two,
        cases,
    })
}

/// The pipe probes' MB/s, by streams (what a service case is set beside).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pipes {
    pub one: Option<f64>,
    pub two: Option<f64>,
}

/// `def` read locally (the baseline), then through the service with one and two
/// workers reading under `roots`; each service case checked to deliver as many
/// records as the local read, and set beside the local read, the limit and the pipe.
pub async fn compare(
    exe: &Path,
    name: &str,
    def: &DatasetDef,
    roots: &str,
    logs: &Path,
    loopback: Loopback,
    pipes: Pipes,
) -> anyhow::Result<Vec<FilesCase>> {
    tracing::info!("--- {name}, local");
    let local = local(def).await?;
    let base =
        Base { records_per_s: local.records as f64 / local.secs, mb_per_s: local.mb_per_s() };
    let mut cases = vec![case(name, "local, no service", &local, None)];
    for workers in [1usize, 2] {
        tracing::info!("--- {name}, {workers} worker(s)");
        let m = service(exe, def, workers, roots, logs).await?;
        if m.records != local.records {
            anyhow::bail!(
                "{name} with {workers} worker(s) delivered {} records, locally {}: \
                 DYNAMIC over files must deliver each record exactly once",
                m.records,
                local.records
            );
        }
        let setup = format!("service, {workers} worker{}", if workers == 1 { "" } else { "s" });
        let link = if workers == 1 { loopback.one_stream } else { loopback.two_streams };
        let limit = link.map(|gb| (gb * 1e3).min(base.mb_per_s));
        let pipe = if workers == 1 { pipes.one } else { pipes.two };
        cases.push(case(name, &setup, &m, Some(Bounds { base, limit, pipe })));
    }
    Ok(cases)
}

struct Measured {
    records: u64,
    bytes: u64,
    first_element_s: f64,
    secs: f64,
    /// CPU of the worker processes over the read, if any.
    worker_cpu: Option<Duration>,
    /// CPU of this process over the read.
    reader_cpu: Duration,
}

impl Measured {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-9)
    }
}

/// The local read of a pipeline, which its service cases are set beside.
#[derive(Clone, Copy)]
struct Base {
    records_per_s: f64,
    mb_per_s: f64,
}

/// What a service case is set beside: the local read, the limit and the pipe (MB/s).
#[derive(Clone, Copy)]
struct Bounds {
    base: Base,
    limit: Option<f64>,
    pipe: Option<f64>,
}

fn case(pipeline: &str, setup: &str, m: &Measured, bounds: Option<Bounds>) -> FilesCase {
    let rps = m.records as f64 / m.secs.max(1e-9);
    let per_record = |d: Duration| d.as_secs_f64() * 1e6 / m.records.max(1) as f64;
    let limit = bounds.and_then(|b| b.limit);
    let pipe = bounds.and_then(|b| b.pipe);
    FilesCase {
        pipeline: pipeline.into(),
        setup: setup.into(),
        records: m.records,
        bytes: m.bytes,
        first_element_s: m.first_element_s,
        secs: m.secs,
        records_per_s: rps,
        mb_per_s: m.mb_per_s(),
        vs_local: bounds.map(|b| rps / b.base.records_per_s),
        limit_mb_per_s: limit,
        vs_limit: limit.map(|l| m.mb_per_s() / l),
        pipe_mb_per_s: pipe,
        vs_pipe: pipe.map(|p| m.mb_per_s() / p),
        worker_cpu_us_per_record: m.worker_cpu.map(per_record),
        reader_cpu_us_per_record: per_record(m.reader_cpu),
    }
}

/// The pipeline run by the executor in this process.
pub(crate) async fn local_rate(def: &DatasetDef) -> anyhow::Result<(u64, f64, Duration)> {
    let m = local(def).await?;
    Ok((m.records, m.secs, m.reader_cpu))
}

/// The pipeline run by the executor in this process.
async fn local(def: &DatasetDef) -> anyhow::Result<Measured> {
    let def = def.clone();
    tokio::task::spawn_blocking(move || {
        let cpu = cpu_time("self")?;
        let mut tally = Tally::new();
        for e in def.iter_local(&FunctionRegistry::builtin())? {
            tally.add(&e?);
        }
        Ok(tally.done(None, cpu_time("self")? - cpu))
    })
    .await?
}

/// `def` through the service with `workers` workers: (records, secs from the
/// read request to the end of the stream, worker CPU).
pub(crate) async fn service_rate(
    exe: &Path,
    def: &DatasetDef,
    workers: usize,
    data: &str,
    logs: &Path,
) -> anyhow::Result<(u64, f64, Duration)> {
    let m = service(exe, def, workers, data, logs).await?;
    Ok((m.records, m.first_element_s + m.secs, m.worker_cpu.unwrap_or_default()))
}

/// One dispatcher (in memory) and `workers` worker processes, all reading under
/// `data` (their `--data-roots`); the reader is this process. Timed from the read
/// request to the end of the stream.
async fn service(
    exe: &Path,
    def: &DatasetDef,
    workers: usize,
    data: &str,
    logs: &Path,
) -> anyhow::Result<Measured> {
    let spec = |args: Vec<String>, log: String| crate::service::spec(exe, args, &logs.join(log));
    // Held until the dispatcher is gone (it drops after `_dispatcher`).
    let port = Port::reserve()?;
    let address = port.address();
    let roots = ["--data-roots".to_string(), data.to_string()];
    let mut dispatcher_args = vec!["dispatcher".into(), "--port".into(), port.number().to_string()];
    dispatcher_args.extend(roots.clone());
    let _dispatcher =
        Child::start_async(&spec(dispatcher_args, format!("files-dispatcher-{workers}.log")))
            .await?;
    let mut procs = vec![];
    for i in 0..workers {
        let mut args = vec!["worker".into(), "--dispatcher".into(), address.clone()];
        args.extend(roots.clone());
        procs.push(
            Child::start_async(&spec(args, format!("files-worker-{workers}-{i}.log"))).await?,
        );
    }
    let client = Client::new(&[address], RetryPolicy::default())?;
    // Wait until every worker registered, so each case has the workers it names.
    let deadline = Instant::now() + START_TIMEOUT;
    while client.status().await?.workers.len() < workers {
        if Instant::now() > deadline {
            anyhow::bail!("{workers} worker(s) did not register within the start timeout");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let worker_cpu = || -> anyhow::Result<Duration> {
        procs.iter().map(|p| cpu_time(&p.id().to_string())).sum()
    };
    let (workers_before, reader_before) = (worker_cpu()?, cpu_time("self")?);
    let mut tally = Tally::new();
    let mut stream = client.distribute(def, ReadOptions::new(ProcessingMode::Dynamic)).await?;
    while let Some(e) = stream.next().await {
        tally.add(&e?);
    }
    let (workers, reader) = (worker_cpu()? - workers_before, cpu_time("self")? - reader_before);
    Ok(tally.done(Some(workers), reader))
}
