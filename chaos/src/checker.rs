//! The checker: reads a run's history (elements received, faults injected) and
//! verifies Sluice's delivery guarantees against it, per epoch, in the style of
//! Jepsen / etcd's robustness tests. It sees only the history, so a kept
//! `history.jsonl` can be checked again later. `docs/chaos.md` states each
//! invariant exactly as implemented here.
//!
//! ```text
//!   &[Event] ──▶ run::Run::read ─┬─▶ deliveries::check  no-duplicates, exactly-once,
//!   (history)    (setup, epochs, │                      bounded-loss, off-copies
//!                 fault spans)   ├─▶ completion::check  completion (ends, bound)
//!                                ├─▶ completion::check_registry       registry
//!                                └─▶ stall / recovery times ──▶ Summary
//! ```
//!
//! Violations come in that order: problems with the history itself ("history",
//! "in-range"), then deliveries epoch by epoch, then completion, then registry.

mod completion;
mod deliveries;
mod explain;
mod run;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::history::{Event, Fault, Millis};
pub use explain::explain;
use run::Run;

/// The invariant names a [`Violation`] carries.
pub const HISTORY: &str = "history";
pub const IN_RANGE: &str = "in-range";
pub const NO_DUPLICATES: &str = "no-duplicates";
pub const EXACTLY_ONCE: &str = "exactly-once";
pub const BOUNDED_LOSS: &str = "bounded-loss";
pub const OFF_COPIES: &str = "off-copies";
pub const COMPLETION: &str = "completion";
pub const REGISTRY: &str = "registry";

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
    /// that show it ([`explain`] prints them 1-based, as `line N`).
    pub lines: Vec<usize>,
}

/// One run in numbers, for the report's table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub seed: u64,
    pub scenario: String,
    pub mode: String,
    /// [`Fault::kind_name`] → how many were injected.
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

/// Checks a history; never panics on a malformed or truncated one (what cannot
/// be checked is itself reported as a "history" violation).
pub fn check(events: &[Event], opts: &CheckOptions) -> CheckResult {
    let mut violations = Vec::new();
    let run = Run::read(events, &mut violations);
    let tally = deliveries::check(&run, opts, &mut violations);
    completion::check(&run, opts, &mut violations);
    completion::check_registry(&run, &mut violations);

    let mut summary = Summary {
        elements_checked: run.arrivals.len() as u64,
        duplicates: tally.duplicates,
        losses: tally.losses,
        losses_by_worker_kill: tally.lost_by_kill.into_iter().collect(),
        longest_stall_after_leader_kill_ms: longest_stall_after_leader_kill(&run),
        time_to_recover_ms: time_to_recover(events),
        epochs: (0..run.epochs.len()).filter(|e| run.completed(*e)).count() as u32,
        violations: violations.len(),
        ..Summary::default()
    };
    if let Some(setup) = &run.setup {
        summary.seed = setup.seed;
        summary.scenario = setup.scenario.clone();
        summary.mode = setup.mode_name.clone();
    }
    for fault in &run.faults {
        *summary.faults_by_kind.entry(fault.fault.kind_name().to_string()).or_default() += 1;
    }
    CheckResult { summary, violations }
}

/// For each leader kill: the longest gap between consecutive element arrivals
/// from the kill (counted as the first point) to the first arrival at or after
/// the kill healed. A kill after which nothing arrives is not counted (the
/// completion check reports a read that never ended). Gaps caused by other
/// faults inside that window are not told apart.
fn longest_stall_after_leader_kill(run: &Run) -> Option<u64> {
    let leader_kills = run
        .faults
        .iter()
        .filter(|f| matches!(f.fault, Fault::KillDispatcher { was_leader: true, .. }));
    leader_kills
        .filter_map(|kill| {
            let healed = kill.end.unwrap_or(Millis::MAX);
            let from = run.arrivals.partition_point(|t| *t < kill.start);
            let mut previous = kill.start;
            let mut longest = None;
            for &t in &run.arrivals[from..] {
                longest = longest.max(Some(t - previous));
                previous = t;
                if t >= healed {
                    break;
                }
            }
            longest
        })
        .max()
}

/// From the last `FaultEnd` to the last `EpochEnd` (0 if the last heal came
/// after the reading ended).
fn time_to_recover(events: &[Event]) -> Option<u64> {
    let last_heal = events
        .iter()
        .filter_map(|e| match e {
            Event::FaultEnd { t_ms, .. } => Some(*t_ms),
            _ => None,
        })
        .max()?;
    let last_end = events
        .iter()
        .filter_map(|e| match e {
            Event::EpochEnd { t_ms, .. } => Some(*t_ms),
            _ => None,
        })
        .max()?;
    Some(last_end.saturating_sub(last_heal))
}

/// Sorted, deduplicated, at most [`MAX_LINES`].
fn first_lines(mut lines: Vec<usize>) -> Vec<usize> {
    lines.sort_unstable();
    lines.dedup();
    lines.truncate(MAX_LINES);
    lines
}

/// "12.345 s".
fn fmt_ms(ms: Millis) -> String {
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}
