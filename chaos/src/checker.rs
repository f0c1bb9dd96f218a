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
//! A lifecycle run (its `Start` says so) is checked by `lifecycle` instead: many
//! jobs, each accounted for (completed with its multiset, or failed with a reason
//! the run caused).
//!
//! An exactly-once run (its `Start` says so) is checked by `trainers` instead:
//! trainers restored from checkpoints roll back what they consumed after them;
//! with a deterministic order, `order` also demands each consumer's sequence.
//!
//! Violations come in that order: problems with the history itself ("history",
//! "in-range"), then deliveries epoch by epoch, then completion, then registry.
//!
//! The options, the invariant names, [`Violation`], [`Summary`] and [`CheckResult`] live
//! in `verdict`, the leaf every check uses; this module runs the checks and re-exports them.

mod completion;
mod deliveries;
mod explain;
mod lifecycle;
mod order;
mod run;
mod trainers;
mod verdict;

use crate::history::{Event, Fault, Millis};
pub use explain::explain;
use run::Run;
pub use verdict::{
    CheckOptions, CheckResult, Summary, Violation, BOUNDED_LOSS, COMPLETION, DETERMINISTIC_ORDER,
    EXACTLY_ONCE, HISTORY, IN_RANGE, LOSS_CAUSE, NO_DUPLICATES, OFF_COPIES, REGISTRY,
};

/// Checks a history; never panics on a malformed or truncated one (what cannot
/// be checked is itself reported as a "history" violation).
pub fn check(events: &[Event], opts: &CheckOptions) -> CheckResult {
    if events.iter().any(|e| matches!(e, Event::Start { lifecycle: true, .. })) {
        return lifecycle::check(events);
    }
    if events.iter().any(|e| matches!(e, Event::Start { exactly_once: true, .. })) {
        return trainers::check(events);
    }
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
