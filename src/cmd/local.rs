//! `sluice local`: a dispatcher quorum, N workers and a reader in one process,
//! on loopback, over a sample dataset (or `--spec`). The quickest way to see
//! Sluice work end to end. The dispatchers journal in memory unless `--work-dir`.

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
    /// Number of dispatcher nodes in the Raft group (1 or 3).
    #[arg(long, default_value_t = 3)]
    pub dispatchers: u64,
    /// Journal the dispatchers here (see `sluice dispatcher --work-dir`).
    #[arg(long)]
    pub work_dir: Option<String>,
    /// off (parallel_epochs) or dynamic (distributed_epoch).
    #[arg(long, default_value = "dynamic")]
    pub mode: String,
    /// JSON dataset spec to read instead of the sample.
    #[arg(long)]
    pub spec: Option<String>,
    /// Print only the summary line.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub data_roots: super::DataRootsFlag,
    #[command(flatten)]
    pub python: super::python::PythonFlags,
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
    if a.dispatchers == 0 {
        anyhow::bail!("--dispatchers must be at least 1");
    }
    let registry = FunctionRegistry::builtin();
    // The workers share one pool of Python processes (they share this process).
    let worker_registry = a.python.attach(registry.clone(), "127.0.0.1", false)?;
    let data_roots = a.data_roots.roots()?;
    // Bind every node first, so each knows all peers' addresses.
    let mut listeners = Vec::new();
    for _ in 0..a.dispatchers {
        listeners.push(TcpListener::bind("127.0.0.1:0").await?);
    }
    // Each node's Raft port is its own listener (a group of one has none).
    let mut raft_listeners = Vec::new();
    let raft_ports = if a.dispatchers > 1 { a.dispatchers } else { 0 };
    for _ in 0..raft_ports {
        raft_listeners.push(TcpListener::bind("127.0.0.1:0").await?);
    }
    let mut peers = std::collections::BTreeMap::new();
    let mut raft_peers = std::collections::BTreeMap::new();
    for (i, l) in listeners.iter().enumerate() {
        peers.insert(i as u64 + 1, l.local_addr()?.to_string());
    }
    for (i, l) in raft_listeners.iter().enumerate() {
        raft_peers.insert(i as u64 + 1, l.local_addr()?.to_string());
    }
    let addresses: Vec<String> = peers.values().cloned().collect();
    let mut dispatchers = Vec::new();
    let mut raft_listeners = raft_listeners.into_iter();
    for (i, listener) in listeners.into_iter().enumerate() {
        let config = DispatcherConfig {
            node_id: i as u64 + 1,
            peers: peers.clone(),
            raft_peers: raft_peers.clone(),
            work_dir: a.work_dir.clone(),
            data_roots: data_roots.clone(),
            ..DispatcherConfig::default()
        };
        let raft = raft_listeners.next();
        let d = sluice_dispatcher::spawn_with_raft(listener, raft, config, registry.clone());
        dispatchers.push(d.await?);
    }
    let mut workers = Vec::with_capacity(a.workers);
    for _ in 0..a.workers {
        let mut config = WorkerConfig::new(addresses.clone());
        config.heartbeat_interval = Duration::from_millis(100);
        config.data_roots = data_roots.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        workers.push(sluice_worker::spawn(listener, config, worker_registry.clone()).await?);
    }
    let policy = RetryPolicy::default().with_deadline(Duration::from_secs(10));
    let client = Client::new(&addresses, policy.clone())?;
    let stream = client.distribute(&def, ReadOptions::new(mode).worker_retry(policy)).await?;
    let job = stream.job_name().to_string();
    let summary = super::read::print_elements(stream, a.quiet, None).await?;
    println!(
        "sluice local: {} from {} workers (mode {mode}, job {job}, {} dispatchers: {})",
        summary.line(),
        a.workers,
        a.dispatchers,
        addresses.join(" ")
    );
    for w in workers {
        w.shutdown().await?;
    }
    for d in dispatchers {
        d.shutdown().await?;
    }
    Ok(())
}
