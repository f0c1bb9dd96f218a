//! Sluice's chaos suite: starts real dispatcher and worker processes on
//! 127.0.0.1, injects a seeded schedule of faults while consumers read, records a
//! history, and checks the guarantees against it.
//!
//! # Layout
//! - [`history`]: the JSON-lines history (elements received, faults injected) that
//!   the runner writes and the checker and report read.
//! - [`checker`]: reads a history and verifies the guarantees per epoch (duplicates,
//!   losses, OFF copies, completion, registry) into violations and a [`checker::Summary`].
//! - [`report`]: the summary table, `report.json` and the throughput-over-time SVG chart.

pub mod campaign;
pub mod checker;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod procs;
pub mod proxy;
pub mod recorder;
pub mod report;
pub mod runner;
pub mod scenarios;
