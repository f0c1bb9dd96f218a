//! Sluice's chaos suite: starts real dispatcher and worker processes on
//! 127.0.0.1, injects a seeded schedule of faults while consumers read, records a
//! history, and checks the guarantees against it.
//!
//! # Layout
//! ```text
//!  campaign ─► runner ─┬─► cluster (testkit children: dispatchers, workers; proxy per Raft link, S3)
//!   (runs, soak)       ├─► consumers ─► recorder ─► history.jsonl
//!                      ├─► faults (seeded schedule) ─► faults::execute ─► cluster, recorder
//!                      └─► checker ─► report (table, report.json, chart)
//! ```
//! - [`scenarios`]: the named scenarios (faults allowed, mode, storage, sizes) and the CI seeds.
//! - [`faults`]: the schedule drawn from a seed; [`faults::execute`] applies it to the cluster.
//! - [`cluster`]: three dispatcher processes, workers, the fault proxies, moto for S3 (the
//!   processes and their ports are `sluice_testkit`'s: killed with the harness, every wait
//!   bounded); [`proxy`]: the fault-injecting proxy.
//! - [`runner`]: one scenario with one seed, end to end; [`recorder`]: funnels events to the
//!   history file; [`campaign`]: several runs or a soak, the totals, `--check`.
//! - [`lifecycle`]: the service-lifecycle soak: a stream of jobs on one cluster while
//!   workers are killed, drained and replaced and the dispatchers restart one by one
//!   (checked by `checker::lifecycle`).
//! - [`data`]: what an exactly-once job reads: `range`, or the same values in
//!   Parquet files or WebDataset shards written for the run.
//! - [`trainers`]: exactly-once scenarios' consumers: trainers that take positions at
//!   synchronized checkpoints and are restarted from them with another count.
//! - [`history`]: the JSON-lines history (elements received, faults injected) that
//!   the runner writes and the checker and report read.
//! - [`checker`]: reads a history and verifies the guarantees per epoch (duplicates,
//!   losses, OFF copies, completion, registry) into violations and a [`checker::Summary`]
//!   (`checker::run` reads the history, `deliveries` and `completion` check it, `explain`
//!   prints a result; `checker::verdict` is the leaf of types they all share).
//! - [`report`]: the summary table, `report.json` and the throughput-over-time SVG chart.

pub mod campaign;
pub mod checker;
pub mod cluster;
pub mod data;
pub mod faults;
pub mod history;
pub mod lifecycle;
pub mod proxy;
pub mod recorder;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod trainers;
