//! The replicated state of exactly-once delivery (docs/exactly-once.md): the
//! trailing section of [`crate::state::State`] (persisted layout version 2,
//! `raft/versioned.rs`). It changes only through `apply` (`apply/consumed.rs`,
//! `apply/orphans.rs`, `apply/restore.rs`); the queries the heartbeat answer and
//! the state machine share are methods here.
//!
//! Why a section of its own and not fields of `Job` / `Iteration`: the types of
//! version 1 stay as they were, so the frozen version-1 `State` reuses them and a
//! migration only adds an empty section. A job or iteration that is not listed
//! here is at-most-once and behaves exactly as before.
//!
//! What is kept per exactly-once iteration, and why each stays bounded:
//! - `consumed`: every record any consumer reported, as a [`RecordSet`] whose
//!   watermark advances over whole units (bounded by the units in flight);
//! - `generations`: for checkpoint watermarks, generation `g` → the union of
//!   everything reported with a generation `<= g` (see [`Progress::checkpoint`]);
//!   entries no live consumer can ask about are folded away, and at most
//!   [`MAX_GENERATIONS`] are kept;
//! - `granted`: per task, the unit ranges granted to it that are not yet below the
//!   watermark (what the task's loss orphans);
//! - `orphans`: units of lost tasks, each with the consumers that must still
//!   acknowledge the loss before they are handed out again.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sluice_positions::{RecordSet, Run, UnitRecords};

use crate::order::Order;

use crate::ids::{ClientId, IterationId, JobId, TaskId};

/// The most runs one `ReportConsumed` may carry (a client sends the rest later).
pub const MAX_REPORT_RUNS: usize = 65_536;
/// The most skip runs one grant carries: a grant with more is cut shorter.
pub const MAX_SKIP_RUNS: usize = 65_536;
/// The most per-generation entries kept per iteration (oldest dropped first:
/// a consumer that far behind gets a lower watermark, never a wrong one).
pub const MAX_GENERATIONS: usize = 16;

/// The exactly-once section of the state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExactlyOnceState {
    /// Exactly-once jobs → how many records a unit has when no end was reported.
    /// A job not listed is at-most-once.
    pub jobs: BTreeMap<JobId, UnitRecords>,
    /// The progress of every iteration of an exactly-once job.
    pub iterations: BTreeMap<IterationId, Progress>,
    /// Exactly-once jobs read in a deterministic order (`crate::order`). Last,
    /// and new in persisted layout version 3 (`raft/layout_v2.rs` is the
    /// section without it).
    pub orders: BTreeMap<JobId, Order>,
}

/// Units a lost task held: handed out again once no consumer waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Orphan {
    pub task_id: TaskId,
    /// Units `[begin, end)`, none of them whole when orphaned.
    pub begin: u64,
    pub end: u64,
    /// Consumers of the iteration that have not yet listed the task in
    /// `lost_tasks_done` (a released consumer is removed).
    pub waiting: BTreeSet<ClientId>,
}

/// The skip runs of a task's last grant, kept so that a replayed GetSplit gets
/// the same answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastSkips {
    pub worker_uid: u64,
    pub sequence: u64,
    pub runs: Vec<Run>,
}

/// One exactly-once iteration's progress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub rule: UnitRecords,
    /// Every consumed record (the restored position's included).
    pub consumed: RecordSet,
    /// What a restored iteration started from (empty otherwise): counts as
    /// consumed before any generation.
    pub base: RecordSet,
    /// generation g → the union of `base` and every report of generation <= g.
    pub generations: BTreeMap<u64, RecordSet>,
    /// Each consumer's generation (the highest reported, or the restored one).
    pub client_generations: BTreeMap<ClientId, u64>,
    /// task → unit ranges `begin → end` granted to it, not yet below the watermark.
    pub granted: BTreeMap<TaskId, BTreeMap<u64, u64>>,
    pub orphans: Vec<Orphan>,
    /// task → the skip runs of its last grant (only grants that had some).
    pub last_skips: BTreeMap<TaskId, LastSkips>,
    /// `Position::restore_key` of the position this iteration was restored from.
    pub restore_key: Option<u64>,
}

impl ExactlyOnceState {
    pub fn is_exactly_once(&self, job_id: JobId) -> bool {
        self.jobs.contains_key(&job_id)
    }

    /// The deterministic order of an iteration's job, if it has one.
    pub fn order_of(&self, job_id: JobId) -> Option<Order> {
        self.orders.get(&job_id).copied()
    }

    /// Whether the iteration still has lost units to hand out again.
    pub fn has_orphans(&self, iteration_id: IterationId) -> bool {
        self.iterations.get(&iteration_id).is_some_and(|p| !p.orphans.is_empty())
    }
}

impl Progress {
    pub fn new(rule: UnitRecords, base: RecordSet) -> Self {
        let mut consumed = base.clone();
        consumed.advance(rule);
        Progress { rule, consumed, base, ..Default::default() }
    }

    /// The checkpoint watermark for a consumer at generation `g` (it has taken `g`
    /// positions; its next one is of generation `g`): `(W, G)` with `G <= g` and
    /// `W` the watermark of everything reported with a generation `<= G`, by any
    /// consumer. A record reported with generation `<= g` was consumed before its
    /// consumer's position of generation `g`, so the positions of one checkpoint
    /// `g` together claim every unit below `W`, and no record consumed after any
    /// consumer's position of generation `g`. `(0, g)` when nothing is known.
    pub fn checkpoint(&self, g: u64) -> (u64, u64) {
        match self.generations.range(..=g).next_back() {
            Some((gen, set)) => (set.watermark(), *gen),
            None => (self.base.watermark(), g),
        }
    }

    /// Adds a report of generation `g` to every per-generation entry it belongs
    /// to (creating entry `g` from the one below it), then folds what no live
    /// consumer can ask about.
    pub fn record_generation(&mut self, g: u64, insert: impl Fn(&mut RecordSet)) {
        if !self.generations.contains_key(&g) {
            let below =
                self.generations.range(..g).next_back().map(|(_, s)| s.clone()).unwrap_or_else(
                    || {
                        let mut b = self.base.clone();
                        b.advance(self.rule);
                        b
                    },
                );
            self.generations.insert(g, below);
        }
        let rule = self.rule;
        for (_, set) in self.generations.range_mut(g..) {
            insert(set);
            set.advance(rule);
        }
        self.fold_generations();
    }

    /// Drops entries below the lowest generation of a live consumer (keeping the
    /// one it reads), and the oldest beyond [`MAX_GENERATIONS`]. Dropping an entry
    /// only lowers the watermark some consumer is answered: never unsafe.
    pub fn fold_generations(&mut self) {
        if let Some(low) = self.client_generations.values().min().copied() {
            if let Some((keep, _)) = self.generations.range(..=low).next_back() {
                let keep = *keep;
                self.generations = self.generations.split_off(&keep);
            }
        }
        while self.generations.len() > MAX_GENERATIONS {
            self.generations.pop_first();
        }
    }

    /// Orphans that no consumer waits for, in order.
    pub fn ready_orphan(&self) -> Option<usize> {
        self.orphans.iter().position(|o| o.waiting.is_empty())
    }

    /// Forgets granted ranges wholly below the watermark. An empty range (a
    /// deterministic order's announcement of a split that was all whole when
    /// granted) is kept while `announced(begin)` says its consumer may still
    /// wait for it: its consumer learns the place is done only from the
    /// announcement, and a lost task's must be made again (`orphans.rs`).
    pub fn trim_granted(&mut self, announced: impl Fn(u64) -> bool) {
        let w = self.consumed.watermark();
        for ranges in self.granted.values_mut() {
            ranges.retain(|begin, end| *end > w || (*begin == *end && announced(*begin)));
        }
        self.granted.retain(|_, r| !r.is_empty());
    }

    /// The units of `[begin, end)` that are not whole, as maximal ranges (units
    /// below the watermark and whole units above it left out).
    pub fn unfinished_ranges(&self, begin: u64, end: u64) -> Vec<(u64, u64)> {
        let begin = begin.max(self.consumed.watermark());
        if begin >= end {
            return vec![];
        }
        // Only units with records or an end held can be whole above the watermark.
        let mut held: BTreeSet<u64> =
            self.consumed.runs_in(begin, end).into_iter().map(|r| r.unit).collect();
        held.extend(self.consumed.ends().map(|(u, _)| u).filter(|u| (begin..end).contains(u)));
        let mut out = vec![];
        let mut start = begin;
        for u in held {
            if self.consumed.unit_complete(u, self.rule) {
                if start < u {
                    out.push((start, u));
                }
                start = u + 1;
            }
        }
        if start < end {
            out.push((start, end));
        }
        out
    }

    /// The consumed runs within `[begin, end)`, with `end` cut at a unit boundary
    /// so that at most [`MAX_SKIP_RUNS`] are listed (a single unit with more is
    /// granted alone, with all of them: its records must not be read twice).
    pub fn skips_within(&self, begin: u64, end: u64) -> (u64, Vec<Run>) {
        let mut runs = self.consumed.runs_in(begin, end);
        if runs.len() > MAX_SKIP_RUNS {
            let cut_unit = runs[MAX_SKIP_RUNS].unit;
            let end = if cut_unit > begin { cut_unit } else { begin + 1 };
            runs.retain(|r| r.unit < end);
            return (end, runs);
        }
        (end, runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(rule: UnitRecords, runs: &[(u64, u64, u64)], ends: &[(u64, u64)]) -> Progress {
        let runs = runs.iter().map(|&(unit, first, count)| Run { unit, first, count });
        Progress::new(rule, RecordSet::from_parts(0, runs, ends.iter().copied()))
    }

    #[test]
    fn unfinished_ranges_leave_out_whole_units_and_the_watermark() {
        let p =
            progress(UnitRecords::Counted, &[(0, 0, 2), (3, 0, 1), (5, 0, 4)], &[(0, 2), (5, 4)]);
        assert_eq!(p.consumed.watermark(), 1);
        assert_eq!(p.unfinished_ranges(0, 8), vec![(1, 5), (6, 8)]);
        assert_eq!(p.unfinished_ranges(5, 6), vec![]);
    }

    #[test]
    fn a_grant_with_too_many_skips_is_cut_at_a_unit_boundary() {
        // Unit u (1..=3) has 30 000 separate consumed records: 90 000 runs in all.
        let runs: Vec<(u64, u64, u64)> =
            (1..=3u64).flat_map(|u| (0..30_000u64).map(move |r| (u, 2 * r, 1))).collect();
        let p = progress(UnitRecords::Counted, &runs, &[]);
        let (end, skips) = p.skips_within(1, 10);
        assert_eq!(end, 3, "units 1 and 2 (60 000 runs) fit, unit 3 does not");
        assert_eq!(skips.len(), 60_000);
        // One unit with more than the cap is granted alone, with all its runs.
        let runs: Vec<(u64, u64, u64)> = (0..70_000u64).map(|r| (4, 2 * r, 1)).collect();
        let p = progress(UnitRecords::Counted, &runs, &[]);
        let (end, skips) = p.skips_within(4, 9);
        assert_eq!((end, skips.len()), (5, 70_000));
    }
}
