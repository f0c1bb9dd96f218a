//! What the checker hands back and what its checks share: the options, the invariant
//! names, [`Violation`], [`Summary`], [`CheckResult`], and the two helpers every check uses
//! to fill a violation in (`first_lines`, `fmt_ms`).
//!
//! Why a module of its own: `run`, `deliveries`, `completion` and `explain` all build or
//! read these; keeping them in this leaf lets each check depend on it alone, while
//! `checker` (the facade) runs the checks and re-exports the types.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::history::Millis;

/// The invariant names a [`Violation`] carries.
pub const HISTORY: &str = "history";
pub const IN_RANGE: &str = "in-range";
pub const NO_DUPLICATES: &str = "no-duplicates";
pub const EXACTLY_ONCE: &str = "exactly-once";
pub const DETERMINISTIC_ORDER: &str = "deterministic-order";
pub const BOUNDED_LOSS: &str = "bounded-loss";
pub const OFF_COPIES: &str = "off-copies";
pub const COMPLETION: &str = "completion";
pub const REGISTRY: &str = "registry";
/// Lifecycle runs: a loss report names a worker the run did not stop.
pub const LOSS_CAUSE: &str = "loss-cause";

/// History lines kept per violation.
const MAX_LINES: usize = 10;

#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Every epoch must end ("end" outcome) within this long after the last
    /// FaultEnd before its end (or after its first element if no fault healed
    /// during it).
    pub completion_bound: Duration,
    /// DYNAMIC with worker kills: elements one killed worker may take with it
    /// (the splits it held: its buffers + in-flight messages); the harness
    /// computes it from its worker settings.
    pub max_loss_per_worker_kill: u64,
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    /// One of the constants above: "no-duplicates", "exactly-once", …
    pub invariant: &'static str,
    /// What, which epoch, which values (the first few), counts.
    pub message: String,
    /// 0-based indexes into the events slice of the first (≤ 10) history lines
    /// that show it ([`explain`](super::explain()) prints them 1-based, as `line N`).
    pub lines: Vec<usize>,
}

/// One run in numbers, for the report's table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub scenario: String,
    pub mode: String,
    /// [`Fault::kind_name`](crate::history::Fault::kind_name) → how many were injected.
    pub faults_by_kind: BTreeMap<String, u32>,
    /// `Element` lines in the history.
    pub elements_checked: u64,
    /// Deliveries beyond what is allowed: DYNAMIC, every delivery after a
    /// value's first in its epoch; OFF, beyond W + worker kills in the epoch.
    pub duplicates: u64,
    /// In epochs every consumer ended: DYNAMIC, values never delivered; OFF,
    /// copies short of W.
    pub losses: u64,
    /// Per worker-kill fault id: the elements lost that the checker attributes
    /// to it (DYNAMIC; each gap of missing values goes to the kill in force
    /// during its epoch nearest in time to the delivery next to the gap).
    pub losses_by_worker_kill: Vec<(u32, u64)>,
    /// Longest time without any element arriving, measured from each leader
    /// kill (FaultStart of KillDispatcher{was_leader:true}) until elements flow
    /// again (max over kills), in ms.
    pub longest_stall_after_leader_kill_ms: Option<u64>,
    /// From the last FaultEnd to the end of the last epoch, in ms.
    pub time_to_recover_ms: Option<u64>,
    /// Epochs that every consumer read to the end.
    pub epochs: u32,
    pub violations: usize,
    /// Lifecycle runs: jobs started, completed with their multiset, and failed
    /// with a reason the run caused (DataLost naming a worker it killed).
    pub jobs_started: u64,
    pub jobs_completed: u64,
    pub jobs_failed_with_reason: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    pub summary: Summary,
    pub violations: Vec<Violation>,
}

impl CheckResult {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Sorted, deduplicated, at most [`MAX_LINES`].
pub(super) fn first_lines(mut lines: Vec<usize>) -> Vec<usize> {
    lines.sort_unstable();
    lines.dedup();
    lines.truncate(MAX_LINES);
    lines
}

/// "12.345 s".
pub(super) fn fmt_ms(ms: Millis) -> String {
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}
