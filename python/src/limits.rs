//! The dispatcher's caps, quotas, TTLs and server bounds as Python gives
//! them: one `limits` mapping of name → number (`servers.py` turns its
//! keywords into it), so each has the name of its `sluice dispatcher` flag
//! without `--max-`'s dashes. An unknown name or a bad value is refused, naming it.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use sluice_dispatcher::DispatcherConfig;

use crate::blocking::seconds;
use crate::errors;

/// The names `limits` takes.
const NAMES: [&str; 17] = [
    "max_datasets",
    "max_jobs",
    "max_iterations",
    "max_clients",
    "max_tasks_per_worker",
    "max_num_consumers",
    "finished_job_ttl",
    "unused_dataset_ttl",
    "max_dataset_bytes",
    "quota_datasets",
    "quota_dataset_bytes",
    "quota_jobs",
    "quota_iterations",
    "quota_live_iterations",
    "quota_clients",
    "max_concurrent_streams",
    "request_timeout",
];

/// A count: a whole number ≥ 1.
fn count(name: &str, v: f64) -> PyResult<u64> {
    if v.fract() != 0.0 || !(1.0..=u64::MAX as f64).contains(&v) {
        return Err(errors::invalid_argument(format!("{name}={v}: give a whole number >= 1")));
    }
    Ok(v as u64)
}

fn count32(name: &str, v: f64) -> PyResult<u32> {
    u32::try_from(count(name, v)?)
        .map_err(|_| errors::invalid_argument(format!("{name}={v}: at most {}", u32::MAX)))
}

/// Sets what `limits` names on `config`; the rest keep their defaults.
pub(crate) fn apply(
    config: &mut DispatcherConfig,
    limits: Option<BTreeMap<String, f64>>,
) -> PyResult<()> {
    for (name, v) in limits.unwrap_or_default() {
        let l = &mut config.limits;
        match name.as_str() {
            "max_datasets" => l.max_datasets = count(&name, v)?,
            "max_jobs" => l.max_jobs = count(&name, v)?,
            "max_iterations" => l.max_iterations = count(&name, v)?,
            "max_clients" => l.max_clients = count(&name, v)?,
            "max_tasks_per_worker" => l.max_tasks_per_worker = count(&name, v)?,
            "max_num_consumers" => l.max_num_consumers = count32(&name, v)?,
            "finished_job_ttl" => config.finished_job_ttl = seconds(&name, v)?,
            "unused_dataset_ttl" => config.unused_dataset_ttl = seconds(&name, v)?,
            "max_dataset_bytes" => config.quotas.max_dataset_bytes = count(&name, v)?,
            "quota_datasets" => config.quotas.datasets = count(&name, v)?,
            "quota_dataset_bytes" => config.quotas.dataset_bytes = count(&name, v)?,
            "quota_jobs" => config.quotas.jobs = count(&name, v)?,
            "quota_iterations" => config.quotas.iterations = count(&name, v)?,
            "quota_live_iterations" => config.quotas.live_iterations = count(&name, v)?,
            "quota_clients" => config.quotas.clients = count(&name, v)?,
            "max_concurrent_streams" => config.server.max_concurrent_streams = count32(&name, v)?,
            "request_timeout" => config.server.request_timeout = seconds(&name, v)?,
            _ => {
                return Err(errors::invalid_argument(format!(
                    "unknown limit `{name}`; the limits are {}",
                    NAMES.join(", ")
                )))
            }
        }
    }
    Ok(())
}
