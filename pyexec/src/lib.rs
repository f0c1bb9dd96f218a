//! A worker's pool of Python processes: runs the user's functions of a pipeline's
//! Python stages (`Dataset.map(fn)` and friends) and implements the dataset
//! crate's [`sluice_dataset::PythonExecutor`].
//!
//! Why processes and pipes: user code must not be able to take the worker down
//! (a segfault, `os._exit`, a hang, a memory blow-up) and Python's interpreter
//! lock would serialise it in one process anyway. Each process runs a small
//! self-contained runner script (`runner.py`, embedded) with the interpreter the
//! worker was given (`--python`); tensors cross the pipes in framed buffers that
//! the runner turns into numpy arrays without per-value Python objects
//! ([`frame`] documents the format; `runner.py` the same).
//!
//! # Layout
//! ```text
//!  Pool::submit ─► bounded queue ─► supervisor (one thread per process)
//!                                      │ LOAD once per function, CALL, wait
//!                                      ▼
//!                         process ── stdin/stdout frames ──► runner.py (python -u -c)
//!                            │ stderr ─► tracing (and the tail a crash reports)
//!  watchdog (one thread) ─ SIGKILLs a process past its call's hard deadline
//! ```
//! - [`config`]: [`PoolConfig`] (what the worker's flags carry) and [`PoolError`].
//! - [`pool`]: [`Pool`], the `PythonExecutor` implementation.
//! - [`stats`]: the counters behind [`PoolStats`].
//! - `supervisor`: one process's job loop, loads, calls, restarts and the
//!   one-at-a-time re-run of a broken call's inputs.
//! - `process`: starting a process (parent-death signal, environment), its
//!   hello, stderr forwarding, kill and reap.
//! - `watchdog`: the hard deadline.
//! - [`frame`] and `codec`: the frame format, requests and answers.
//! - [`bench`]: the figures `sluice bench` reports (pipe bandwidth, per-element
//!   overheads).

pub mod bench;
mod codec;
pub mod config;
pub mod frame;
pub mod pool;
mod process;
pub mod stats;
mod supervisor;
mod watchdog;

pub use codec::Hello;
pub use config::{PoolConfig, PoolError, MAX_CALL_TIMEOUT, MAX_PROCESSES, MIN_MEMORY_LIMIT};
pub use pool::Pool;
pub use process::RUNNER;
pub use stats::PoolStats;
pub use supervisor::GRACE;
