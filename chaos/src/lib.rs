//! Sluice's chaos suite: starts real dispatcher and worker processes on
//! 127.0.0.1, injects a seeded schedule of faults while consumers read, records a
//! history, and checks the guarantees against it.
//!
//! # Layout
//! - [`history`]: the JSON-lines history (elements received, faults injected) that
//!   the runner writes and the checker and report read.

pub mod history;
