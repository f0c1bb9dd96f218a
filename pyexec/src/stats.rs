//! The pool's counters (shared by its supervisors) and their snapshot.

use std::sync::atomic::AtomicU64;

/// The pool's counters, for metrics.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) restarts: AtomicU64,
    pub(crate) calls: AtomicU64,
    pub(crate) elements: AtomicU64,
    pub(crate) failures: AtomicU64,
}

/// A snapshot of the pool's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Processes killed and started again (crashed, hung, garbled an answer).
    pub restarts: u64,
    /// Calls run.
    pub calls: u64,
    /// Inputs of those calls.
    pub elements: u64,
    /// Inputs that failed (an exception, a crash, a timeout).
    pub failures: u64,
}
