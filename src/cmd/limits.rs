//! The `sluice dispatcher` flags that bound what callers can make a dispatcher
//! hold (docs/security.md, "Limits on what one client can make the service
//! hold"), kept out of `serve.rs` so they read as one set.

use clap::Args;
use sluice_dispatcher::{DispatcherConfig, Limits, Quotas};
use sluice_proto::limits::ServerLimits;

#[derive(Args, Debug)]
pub struct LimitsArgs {
    /// Most datasets one dispatcher holds (registered datasets are kept).
    #[arg(long, default_value_t = Limits::default().max_datasets)]
    pub max_datasets: u64,
    /// Most jobs one dispatcher holds.
    #[arg(long, default_value_t = Limits::default().max_jobs)]
    pub max_jobs: u64,
    /// Most iterations one dispatcher holds (finished ones count until collected).
    #[arg(long, default_value_t = Limits::default().max_iterations)]
    pub max_iterations: u64,
    /// Most consumers (client ids) reading at once.
    #[arg(long, default_value_t = Limits::default().max_clients)]
    pub max_clients: u64,
    /// Most unfinished tasks one worker runs.
    #[arg(long, default_value_t = Limits::default().max_tasks_per_worker)]
    pub max_tasks_per_worker: u64,
    /// Most consumers of one coordinated read (num_consumers).
    #[arg(long, default_value_t = Limits::default().max_num_consumers)]
    pub max_num_consumers: u32,
    /// Forget a finished (or garbage-collected) iteration, its tasks, and its
    /// job when it was the last, after this many seconds without a consumer
    /// (0 = keep them for ever).
    #[arg(long, default_value_t = DispatcherConfig::default().finished_job_ttl.as_secs_f64())]
    pub finished_job_ttl_secs: f64,
    /// Forget a dataset no job uses after this many seconds without a job over
    /// it or a registration of it (0 = keep datasets for ever).
    #[arg(long, default_value_t = DispatcherConfig::default().unused_dataset_ttl.as_secs_f64())]
    pub unused_dataset_ttl_secs: f64,
    /// Bytes of all dataset definitions one dispatcher holds.
    #[arg(long, default_value_t = Quotas::default().max_dataset_bytes)]
    pub max_dataset_bytes: u64,
    /// Most datasets one client identity (token name) has registered and held.
    #[arg(long, default_value_t = Quotas::default().datasets)]
    pub quota_datasets: u64,
    /// Bytes of dataset definitions one client identity holds.
    #[arg(long, default_value_t = Quotas::default().dataset_bytes)]
    pub quota_dataset_bytes: u64,
    /// Most jobs one client identity created and holds.
    #[arg(long, default_value_t = Quotas::default().jobs)]
    pub quota_jobs: u64,
    /// Most iterations one client identity created and holds (finished ones
    /// count until forgotten).
    #[arg(long, default_value_t = Quotas::default().iterations)]
    pub quota_iterations: u64,
    /// Most unfinished iterations one client identity created (each has a task
    /// on every worker).
    #[arg(long, default_value_t = Quotas::default().live_iterations)]
    pub quota_live_iterations: u64,
    /// Most consumers (client ids) one client identity holds.
    #[arg(long, default_value_t = Quotas::default().clients)]
    pub quota_clients: u64,
}

/// Seconds from a flag, refused (naming it) when negative or not a number.
fn seconds(flag: &str, secs: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("{flag} {secs}: give a number of seconds >= 0"))
}

impl LimitsArgs {
    /// Sets these flags' fields of `config`.
    pub fn apply(&self, config: &mut DispatcherConfig) -> anyhow::Result<()> {
        config.finished_job_ttl = seconds("--finished-job-ttl-secs", self.finished_job_ttl_secs)?;
        config.unused_dataset_ttl =
            seconds("--unused-dataset-ttl-secs", self.unused_dataset_ttl_secs)?;
        config.quotas = Quotas {
            datasets: self.quota_datasets,
            dataset_bytes: self.quota_dataset_bytes,
            jobs: self.quota_jobs,
            iterations: self.quota_iterations,
            live_iterations: self.quota_live_iterations,
            clients: self.quota_clients,
            max_dataset_bytes: self.max_dataset_bytes,
        };
        config.limits = Limits {
            max_datasets: self.max_datasets,
            max_jobs: self.max_jobs,
            max_iterations: self.max_iterations,
            max_clients: self.max_clients,
            max_tasks_per_worker: self.max_tasks_per_worker,
            max_num_consumers: self.max_num_consumers,
        };
        Ok(())
    }
}

/// The gRPC server bounds both `sluice dispatcher` and `sluice worker` take.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// HTTP/2 streams one client connection may have open at once; a client
    /// over it waits for one to close.
    #[arg(long, default_value_t = ServerLimits::default().max_concurrent_streams)]
    pub max_concurrent_streams: u32,
    /// The longest a request may take until its answer starts (an element
    /// stream, once open, is not cut by it; a dispatcher keeps it above its
    /// longest long poll).
    #[arg(long, default_value_t = ServerLimits::default().request_timeout.as_secs_f64())]
    pub request_timeout_secs: f64,
}

impl ServerArgs {
    pub fn limits(&self) -> anyhow::Result<ServerLimits> {
        let request_timeout = std::time::Duration::try_from_secs_f64(self.request_timeout_secs)
            .map_err(|_| {
                anyhow::anyhow!(
                    "--request-timeout-secs {}: give a number of seconds > 0",
                    self.request_timeout_secs
                )
            })?;
        Ok(ServerLimits {
            max_concurrent_streams: self.max_concurrent_streams,
            request_timeout,
            ..ServerLimits::default()
        })
    }
}
