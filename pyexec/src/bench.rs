//! The pool's figures, for `sluice bench`: what the pipes carry, and what a
//! Python stage costs per element over the same built-in Rust stage.
//!
//! - **pipe**: 1 MiB frames to a process and back (ECHO), in MiB/s of payload
//!   each way — the ceiling any Python stage's data rate meets.
//! - **map overhead**: `range(n)` through a Python `map` of the identity function,
//!   minus the same pipeline through the built-in `identity` map, per element
//!   (calls of 64 elements, one in flight per process).
//! - **map_batches**: `range(n)` through `map_batches` of the identity with
//!   1024-element batches, per element (stacking and unbatching included).
//!
//! The functions run by reference from a module written to a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_dataset::{DatasetDef, FunctionRegistry, PyFunction, PyOp, PythonExecutor, PythonStage};

use crate::{Pool, PoolConfig, PoolError};

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub python: PathBuf,
    /// Elements through each pipeline.
    pub elements: i64,
    pub batch_size: u64,
    /// Bytes per echo frame, and how many frames per process.
    pub frame_bytes: usize,
    pub frames: usize,
}

impl BenchConfig {
    pub fn new(python: impl Into<PathBuf>) -> Self {
        BenchConfig {
            python: python.into(),
            elements: 200_000,
            batch_size: 1024,
            frame_bytes: 1 << 20,
            frames: 512,
        }
    }
}

/// The figures for one pool size.
#[derive(Clone, Debug)]
pub struct BenchRow {
    pub processes: usize,
    /// Payload MiB/s each way through ECHO, all processes together.
    pub pipe_mib_per_s: f64,
    /// Built-in Rust `identity` map, ns per element.
    pub rust_map_ns: f64,
    /// Python `map` of the identity, ns per element.
    pub python_map_ns: f64,
    /// Python `map_batches` of the identity, ns per element.
    pub map_batches_ns: f64,
}

impl std::fmt::Display for BenchRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "python processes {}: pipe {:.0} MiB/s each way; map {:.2} µs/element (Rust {:.2}, \
             overhead {:.2}); map_batches {:.2} µs/element",
            self.processes,
            self.pipe_mib_per_s,
            self.python_map_ns / 1e3,
            self.rust_map_ns / 1e3,
            (self.python_map_ns - self.rust_map_ns) / 1e3,
            self.map_batches_ns / 1e3,
        )
    }
}

const MODULE: &str = "def identity(x):\n    return x\n\n\ndef batch_identity(b):\n    return b\n";

/// Measures each pool size in `processes`.
pub fn run(config: &BenchConfig, processes: &[usize]) -> Result<Vec<BenchRow>, PoolError> {
    let dir = tempfile::tempdir().map_err(|e| PoolError::Config(format!("a temp dir: {e}")))?;
    std::fs::write(dir.path().join("sluice_bench_fns.py"), MODULE)
        .map_err(|e| PoolError::Config(format!("writing the bench module: {e}")))?;
    let mut rows = Vec::new();
    for &n in processes {
        let mut pc = PoolConfig::new(&config.python);
        pc.processes = n;
        pc.env = vec![("PYTHONPATH".into(), dir.path().display().to_string())];
        let pool = Arc::new(Pool::start(pc)?);
        let pipe_mib_per_s = pipe(&pool, config, n);
        let registry = FunctionRegistry::builtin().with_python(pool.clone());
        let source = DatasetDef::range(config.elements);
        let rust_map_ns = per_element(&source.clone().map("identity"), &registry, config.elements);
        let stage = |op, f: &str| {
            let mut s = PythonStage::new(
                op,
                PyFunction::Ref(format!("sluice_bench_fns:{f}")),
                pool.version(),
            );
            s.num_parallel_calls = 0;
            s
        };
        let map = source.clone().python(stage(PyOp::Map, "identity"));
        let python_map_ns = per_element(&map, &registry, config.elements);
        let mut batches = stage(PyOp::MapBatches, "batch_identity");
        batches.batch_size = Some(config.batch_size);
        let map_batches_ns = per_element(&source.python(batches), &registry, config.elements);
        rows.push(BenchRow {
            processes: n,
            pipe_mib_per_s,
            rust_map_ns,
            python_map_ns,
            map_batches_ns,
        });
    }
    Ok(rows)
}

fn pipe(pool: &Arc<Pool>, config: &BenchConfig, threads: usize) -> f64 {
    let payload = Bytes::from(vec![7u8; config.frame_bytes]);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..config.frames {
                    let back = pool.echo(payload.clone()).expect("echo");
                    assert_eq!(back.len(), payload.len(), "the echo came back whole");
                }
            });
        }
    });
    let bytes = (config.frame_bytes * config.frames * threads) as f64;
    bytes / (1 << 20) as f64 / start.elapsed().as_secs_f64()
}

fn per_element(def: &DatasetDef, registry: &FunctionRegistry, n: i64) -> f64 {
    let start = Instant::now();
    let mut count = 0i64;
    for e in def.iter_local(registry).expect("start the pipeline") {
        e.expect("an element");
        count += 1;
    }
    assert_eq!(count, n, "every element came through");
    let took: Duration = start.elapsed();
    took.as_nanos() as f64 / n as f64
}
