//! `sluice dispatcher` and `sluice worker`: long-running servers. Each prints
//! `listening on HOST:PORT` on stdout once it serves (so scripts can use port 0),
//! and stops on Ctrl-C or SIGTERM.

use anyhow::Context;
use clap::Args;
use sluice_dataset::FunctionRegistry;
use sluice_dispatcher::DispatcherConfig;
use sluice_worker::WorkerConfig;
use tokio::net::TcpListener;

#[derive(Args, Debug)]
pub struct DispatcherArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 5050)]
    pub port: u16,
    /// Source elements per dynamic-sharding split.
    #[arg(long, default_value_t = 1)]
    pub elements_per_split: u64,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub dispatcher: super::DispatcherFlags,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Address clients should dial, if not HOST:PORT.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Elements buffered per task.
    #[arg(long, default_value_t = 256)]
    pub buffer: usize,
}

async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port} (is the port in use?)"))?;
    println!("listening on {}", listener.local_addr()?);
    Ok(listener)
}

async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub async fn dispatcher(a: DispatcherArgs) -> anyhow::Result<()> {
    let config = DispatcherConfig { elements_per_split: a.elements_per_split };
    config.validate()?;
    tracing::warn!(
        "no --work-dir: dispatcher state is in memory and is lost when this process stops"
    );
    let listener = bind(&a.host, a.port).await?;
    sluice_dispatcher::run(listener, config, FunctionRegistry::builtin(), stop_signal()).await?;
    Ok(())
}

pub async fn worker(a: WorkerArgs) -> anyhow::Result<()> {
    let mut config = WorkerConfig::new(a.dispatcher.dispatchers.clone());
    config.advertised_address = a.advertise;
    config.task_buffer_elements = a.buffer;
    config.dispatcher_retry = a.dispatcher.retry();
    config.validate()?;
    let listener = bind(&a.host, a.port).await?;
    sluice_worker::run(listener, config, FunctionRegistry::builtin(), stop_signal()).await?;
    Ok(())
}
