//! Python stages (issue 15): what a user's Python function costs per element over
//! the same built-in Rust stage, next to the pipe bandwidth between the worker and
//! its Python processes (the ceiling of any Python stage's data rate), for pools of
//! 1 and 2 processes. The measuring is `sluice_pyexec::bench`; this module runs it
//! off the async runtime and shapes the rows for the report.

use std::path::PathBuf;

use anyhow::Context;
use serde::Serialize;

/// The interpreter and sizes of the section.
#[derive(Clone, Debug)]
pub struct PythonConfig {
    /// The pool's interpreter (`sluice bench --python`), with numpy.
    pub python: PathBuf,
    /// Elements through each pipeline.
    pub elements: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PythonRow {
    pub processes: usize,
    /// Payload MiB/s each way through the pipes, all processes together.
    pub pipe_mib_per_s: f64,
    /// µs per element: the built-in Rust identity map, the Python `map` of the
    /// identity, and `map_batches` of the identity over 1024-element batches.
    pub rust_map_us: f64,
    pub python_map_us: f64,
    pub map_batches_us: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Python {
    pub interpreter: String,
    pub elements: i64,
    pub batch_size: u64,
    pub rows: Vec<PythonRow>,
}

/// Measures pools of 1 and 2 processes.
pub async fn run(cfg: PythonConfig) -> anyhow::Result<Python> {
    tokio::task::spawn_blocking(move || {
        let mut bench = sluice_pyexec::bench::BenchConfig::new(&cfg.python);
        bench.elements = cfg.elements;
        let rows = sluice_pyexec::bench::run(&bench, &[1, 2])
            .with_context(|| format!("the Python pool with --python {}", cfg.python.display()))?;
        Ok(Python {
            interpreter: cfg.python.display().to_string(),
            elements: bench.elements,
            batch_size: bench.batch_size,
            rows: rows
                .into_iter()
                .map(|r| PythonRow {
                    processes: r.processes,
                    pipe_mib_per_s: r.pipe_mib_per_s,
                    rust_map_us: r.rust_map_ns / 1e3,
                    python_map_us: r.python_map_ns / 1e3,
                    map_batches_us: r.map_batches_ns / 1e3,
                })
                .collect(),
        })
    })
    .await
    .context("the Python section's thread")?
}
