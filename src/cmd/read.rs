//! `sluice read`: reads a dataset and prints one JSON line per element on stdout,
//! with a progress bar on stderr when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use anyhow::bail;
use clap::Args;
use futures::{FutureExt, StreamExt};
use sluice_client::{ElementStream, ProcessingMode, ReadOptions, TargetWorkers};

#[derive(Args, Debug)]
pub struct ReadArgs {
    #[command(flatten)]
    pub dispatcher: super::DispatcherFlags,
    /// Id of a registered dataset.
    #[arg(long, conflicts_with = "spec")]
    pub dataset_id: Option<String>,
    /// Or a JSON spec to register and read in one go.
    #[arg(long)]
    pub spec: Option<String>,
    /// off (parallel_epochs), dynamic (distributed_epoch), or a static mode over the
    /// dispatcher's --worker-addresses: file, data, file_or_data, hint.
    #[arg(long, default_value = "dynamic")]
    pub mode: String,
    /// Which workers to read: any, local (only workers in this process) or auto (= any).
    #[arg(long, default_value = "auto")]
    pub target_workers: String,
    /// Share a job with other readers of the same name.
    #[arg(long)]
    pub job_name: Option<String>,
    /// Coordinated reads: this many readers of --job-name read in rounds (each
    /// round's elements from one worker); needs --consumer-index and an infinite
    /// dataset (the read runs until stopped). With --deterministic: the number
    /// of consumers of the deterministic order instead.
    #[arg(long, requires = "consumer_index")]
    pub num_consumers: Option<u32>,
    /// Coordinated reads: which reader this is, 0 ≤ index < --num-consumers.
    #[arg(long, requires = "num_consumers")]
    pub consumer_index: Option<u32>,
    /// Bound on buffered element messages and concurrent task streams.
    #[arg(long, default_value_t = 16)]
    pub max_outstanding_requests: usize,
    /// Read through the workers' cross-trainer cache as this trainer (needs
    /// --job-name and an infinite dataset; trainers of one job share the data).
    #[arg(long)]
    pub trainer_id: Option<String>,
    /// Print only the summary line, not the elements.
    #[arg(long)]
    pub quiet: bool,
    /// When a worker is lost with elements of this read undelivered, end the read
    /// normally (exit 0) and report the loss on stderr. Without it such a read
    /// fails (exit non-zero) naming the lost tasks and workers.
    #[arg(long)]
    pub accept_data_loss: bool,
    /// Compression of the elements workers send: auto (zstd from workers not on
    /// loopback, raw from loopback ones), none, or zstd
    /// (docs/operations-compression.md).
    #[arg(long, default_value = "auto", env = "SLUICE_COMPRESSION")]
    pub compression: String,
    /// Serve this reader's Prometheus metrics (sluice_client_wait_seconds, elements
    /// and bytes delivered) at http://HOST:PORT/metrics while it reads
    /// (docs/operations-metrics.md). Off loopback it needs --insecure.
    #[arg(long, value_name = "HOST:PORT", env = "SLUICE_READ_METRICS_ADDR")]
    pub metrics_addr: Option<String>,
    /// With --metrics-addr off loopback: serve the metrics without TLS or
    /// authentication anyway.
    #[arg(long, requires = "metrics_addr")]
    pub insecure: bool,
    /// Require exactly-once delivery (DYNAMIC, a named job, a replayable
    /// pipeline; docs/exactly-once.md): refused if the pipeline cannot be replayed.
    #[arg(long)]
    pub exactly_once: bool,
    /// Exactly-once where the job can have it (a replayable DYNAMIC pipeline),
    /// else at-most-once, never refused; stderr says which and why.
    #[arg(long, conflicts_with = "exactly_once")]
    pub exactly_once_auto: bool,
    /// With --exactly-once: keep this reader's position in FILE. If FILE exists
    /// the read restores from it (a restarted reader gets exactly what it had not
    /// consumed); every --checkpoint-every elements the position is written
    /// there (atomically), after a line `# checkpoint G` on stdout.
    #[arg(long, value_name = "FILE", requires = "exactly_once")]
    pub checkpoint: Option<std::path::PathBuf>,
    /// Elements between two positions written to --checkpoint.
    #[arg(long, default_value_t = 100, requires = "checkpoint")]
    pub checkpoint_every: u64,
    /// With --exactly-once: read in a deterministic order (docs/exactly-once.md):
    /// this reader is --consumer-index of --num-consumers readers of --job-name,
    /// and its sequence depends only on --seed, the dataset and --num-consumers.
    #[arg(long, requires_all = ["exactly_once", "num_consumers"])]
    pub deterministic: bool,
    /// The seed of a --deterministic read's order.
    #[arg(long, default_value_t = 0, requires = "deterministic")]
    pub seed: u64,
}

pub async fn run(a: ReadArgs) -> anyhow::Result<()> {
    let mode: ProcessingMode = a.mode.parse()?;
    let target: TargetWorkers = a.target_workers.parse()?;
    let mut opts = ReadOptions::new(mode)
        .target_workers(target)
        .max_outstanding_requests(a.max_outstanding_requests);
    opts.job_name = a.job_name.clone();
    opts.worker_retry = a.dispatcher.retry();
    opts.accept_data_loss = a.accept_data_loss;
    opts.compression = a.compression.parse().map_err(|e| anyhow::anyhow!("--compression: {e}"))?;
    if a.exactly_once {
        if a.job_name.is_none() {
            bail!("--exactly-once needs --job-name: positions name the job they restore");
        }
        opts = opts.exactly_once(true);
    }
    opts = opts.exactly_once_auto(a.exactly_once_auto);
    let checkpoint = match &a.checkpoint {
        Some(path) => {
            let saved = super::checkpoint::load(path)?;
            if let Some(position) = saved {
                eprintln!("restoring from {} (generation {})", path.display(), position.generation);
                opts = opts.restore(position);
            }
            Some(super::checkpoint::Checkpoint::new(path.clone(), a.checkpoint_every)?)
        }
        None => None,
    };
    // clap requires the two consumer flags together: a deterministic order's
    // consumers, or else a coordinated read's.
    match (a.num_consumers, a.consumer_index) {
        (Some(n), Some(i)) if a.deterministic => opts = opts.deterministic(a.seed, n, i),
        (Some(n), Some(i)) => opts = opts.coordinated(n, i),
        _ => {}
    }
    if let Some(trainer) = &a.trainer_id {
        if a.num_consumers.is_some() {
            bail!(
                "--trainer-id (the cross-trainer cache) and --num-consumers (a coordinated read) \
                   are two different ways to share a job; give one of them"
            );
        }
        opts = opts.cross_trainer_cache(trainer.clone());
    }
    // A reader has no certificate or token file: its endpoint is plain HTTP, so
    // off loopback it needs --insecure.
    let metrics =
        super::serve::bind_metrics(a.metrics_addr.as_deref(), None, false, a.insecure).await?;
    let _metrics = match metrics {
        Some(l) => Some(sluice_client::metrics::serve_on(l)?),
        None => None,
    };
    let client = a.dispatcher.client()?;
    let stream = match (&a.dataset_id, &a.spec) {
        (Some(id), _) => client.from_dataset_id(id, opts).await?,
        (None, Some(spec)) => client.distribute(&super::read_spec(spec)?, opts).await?,
        (None, None) => bail!("say what to read: --dataset-id ID or --spec FILE"),
    };
    if a.exactly_once_auto {
        match stream.at_most_once_reason() {
            None => eprintln!("delivery: exactly-once"),
            Some(why) => eprintln!("delivery: at-most-once ({why})"),
        }
    }
    let summary = print_elements(stream, a.quiet, checkpoint).await?;
    eprintln!("read {}", summary.line());
    Ok(())
}

/// What a finished read prints last.
pub struct Summary {
    pub elements: u64,
    pub bytes: u64,
    pub started: Instant,
    /// What a read that accepted loss lost.
    pub loss: Option<sluice_client::LossReport>,
}

impl Summary {
    pub fn line(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        let loss = match &self.loss {
            Some(report) => format!("; DATA LOST (accepted): {report}"),
            None => String::new(),
        };
        format!(
            "{} elements, {} payload bytes in {:.3} s ({:.0} elements/s, {:.1} MB/s){loss}",
            self.elements,
            self.bytes,
            secs,
            self.elements as f64 / secs.max(1e-9),
            self.bytes as f64 / 1e6 / secs.max(1e-9)
        )
    }
}

/// Prints each element as a JSON line; stops quietly if stdout is closed.
///
/// Lines are buffered while elements are ready, and flushed before waiting for
/// the next one: a scalar's line is a few bytes, so a full buffer can hold
/// thousands of elements, which a slow stream (or one paused by a failover)
/// would otherwise hold back for seconds after they arrived.
pub async fn print_elements(
    mut stream: ElementStream,
    quiet: bool,
    mut checkpoint: Option<super::checkpoint::Checkpoint>,
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} elements ({per_sec})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        Some(bar)
    } else {
        None
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut summary = Summary { elements: 0, bytes: 0, started, loss: None };
    loop {
        let next = match stream.next().now_or_never() {
            Some(next) => next,
            None => {
                if closed(out.flush())? {
                    break;
                }
                stream.next().await
            }
        };
        let Some(element) = next else { break };
        let element = element?;
        summary.elements += 1;
        summary.bytes += element.byte_len() as u64;
        if !quiet && closed(writeln!(out, "{}", element.to_json()))? {
            break;
        }
        if let Some(bar) = &bar {
            bar.inc(1);
        }
        if let Some(c) = &mut checkpoint {
            if c.due(summary.elements) {
                // The lines before the marker are what the position covers.
                if closed(out.flush())? {
                    break;
                }
                c.write(&mut stream, &mut out)?;
            }
        }
    }
    let _ = out.flush();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    summary.loss = stream.loss_report();
    // Its spans end here, before the process flushes them (--otlp-endpoint).
    stream.close().await;
    Ok(summary)
}

/// Whether a write failed because stdout was closed (the reader of a pipe left).
fn closed(result: std::io::Result<()>) -> std::io::Result<bool> {
    match result {
        Ok(()) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(true),
        Err(e) => Err(e),
    }
}
