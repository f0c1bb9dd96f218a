//! `sluice local`: a dispatcher, N workers and a reader in one process, on
//! loopback, over a sample dataset (or `--spec`). The quickest way to see Sluice
//! work end to end.

use std::time::Duration;

use clap::Args;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{Arg, DatasetDef, FunctionRegistry};
use sluice_dispatcher::DispatcherConfig;
use sluice_worker::WorkerConfig;
use tokio::net::TcpListener;

#[derive(Args, Debug)]
pub struct LocalArgs {
    /// Number of workers.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// off (parallel_epochs) or dynamic (distributed_epoch).
    #[arg(long, default_value = "dynamic")]
    pub mode: String,
    /// JSON dataset spec to read instead of the sample.
    #[arg(long)]
    pub spec: Option<String>,
    /// Print only the summary line.
    #[arg(long)]
    pub quiet: bool,
}

/// The sample: squares of 0..20, keeping the even ones, plus one.
pub fn sample() -> DatasetDef {
    DatasetDef::range(20)
        .map("square")
        .filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(0)])
        .map_with("add", vec![Arg::Int(1)])
}

pub async fn run(a: LocalArgs) -> anyhow::Result<()> {
    if a.workers == 0 {
        anyhow::bail!("--workers must be at least 1");
    }
    let mode: ProcessingMode = a.mode.parse()?;
    let def = match &a.spec {
        Some(path) => super::read_spec(path)?,
        None => sample(),
    };
    let registry = FunctionRegistry::builtin();
    let dispatcher = sluice_dispatcher::spawn(
        TcpListener::bind("127.0.0.1:0").await?,
        DispatcherConfig::default(),
        registry.clone(),
    )
    .await?;
    let addresses = vec![dispatcher.address().to_string()];
    let mut workers = Vec::with_capacity(a.workers);
    for _ in 0..a.workers {
        let mut config = WorkerConfig::new(addresses.clone());
        config.heartbeat_interval = Duration::from_millis(100);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        workers.push(sluice_worker::spawn(listener, config, registry.clone()).await?);
    }
    let policy = RetryPolicy::default().with_deadline(Duration::from_secs(10));
    let client = Client::new(&addresses, policy.clone())?;
    let stream = client.distribute(&def, ReadOptions::new(mode).worker_retry(policy)).await?;
    let job = stream.job_name().to_string();
    let summary = super::read::print_elements(stream, a.quiet).await?;
    println!(
        "sluice local: {} from {} workers (mode {mode}, job {job}, dispatcher {})",
        summary.line(),
        a.workers,
        dispatcher.address()
    );
    for w in workers {
        w.shutdown().await?;
    }
    dispatcher.shutdown().await?;
    Ok(())
}
