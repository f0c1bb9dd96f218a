//! [`RecordSet`]: the consumed records of one iteration's source, kept small by a
//! watermark (every unit below it whole) and per-unit record ranges above it.
//!
//! Its size is bounded by the units in flight (granted and not yet whole), not by
//! the epoch: [`RecordSet::advance`] folds every whole unit at the watermark into
//! it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::origin::{Origin, Run};

/// How many records a unit has when no end was reported for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnitRecords {
    /// Every unit is one element: record 0 (range, from_tensor_slices,
    /// list_files without an expanding stage).
    #[default]
    One,
    /// A unit has as many records as its reported end says (file sources, or an
    /// expanding `flat_map` / `interleave`); unknown until reported.
    Counted,
}

/// Why one flat map of `(unit, first) → end` and not a map per unit: the
/// dispatcher and every reader insert one run per consumed element (a unit of
/// one record, most often), and a map per unit cost a node allocation per
/// element and a lookup in two maps; the flat map shares its nodes between
/// units (docs/performance.md, "Exactly once"). The persisted and serialised
/// form stays the per-unit one ([`Layout`]), so journals and snapshots written
/// before read the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Layout", into = "Layout")]
pub struct RecordSet {
    /// Every unit below this is consumed whole.
    watermark: u64,
    /// (unit (>= watermark), first) → end: each unit's consumed records as
    /// disjoint, non-touching `first → end` ranges.
    partial: BTreeMap<(u64, u64), u64>,
    /// unit (>= watermark) → how many records it has, where reported.
    ends: BTreeMap<u64, u64>,
}

/// The serialised form of a [`RecordSet`] (state layout version 2,
/// `dispatcher/src/raft/versioned.rs`): its fields in this order, the ranges
/// grouped per unit.
#[derive(Serialize, Deserialize)]
struct Layout {
    watermark: u64,
    partial: BTreeMap<u64, BTreeMap<u64, u64>>,
    ends: BTreeMap<u64, u64>,
}

impl From<RecordSet> for Layout {
    fn from(s: RecordSet) -> Self {
        let mut partial: BTreeMap<u64, BTreeMap<u64, u64>> = BTreeMap::new();
        for ((unit, first), end) in s.partial {
            partial.entry(unit).or_default().insert(first, end);
        }
        Layout { watermark: s.watermark, partial, ends: s.ends }
    }
}

impl From<Layout> for RecordSet {
    /// Rebuilt by insertion: ranges below the watermark, empty, overlapping or
    /// touching (a hand-made or corrupt state) come out as the invariants want.
    fn from(l: Layout) -> Self {
        let runs = l.partial.into_iter().flat_map(|(unit, ranges)| {
            ranges.into_iter().map(move |(s, e)| Run { unit, first: s, count: e.saturating_sub(s) })
        });
        RecordSet::from_parts(l.watermark, runs, l.ends)
    }
}

impl RecordSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// A set holding every unit below `watermark` and nothing else.
    pub fn below(watermark: u64) -> Self {
        RecordSet { watermark, ..Self::default() }
    }

    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// Number of record ranges held above the watermark (what bounds its size).
    pub fn run_count(&self) -> usize {
        self.partial.len()
    }

    /// Units above the watermark with records or an end held.
    pub fn units_held(&self) -> usize {
        let mut units = 0;
        let mut last = None;
        for (unit, _) in self.partial.keys() {
            if last != Some(*unit) {
                units += 1;
                last = Some(*unit);
            }
        }
        units + self.ends.keys().filter(|u| !self.has_records(**u)).count()
    }

    /// Whether `unit` has consumed records held (above the watermark).
    fn has_records(&self, unit: u64) -> bool {
        self.partial.range((unit, 0)..=(unit, u64::MAX)).next().is_some()
    }

    /// Adds `run` (ignored below the watermark).
    pub fn insert(&mut self, run: Run) {
        if run.count == 0 || run.unit < self.watermark {
            return;
        }
        let unit = run.unit;
        let (mut start, mut end) = (run.first, run.end());
        // Merge with every range of the unit that overlaps or touches [start, end).
        // Most inserts touch none (a new unit) or one (a record continuing a run).
        loop {
            let touching = self
                .partial
                .range((unit, 0)..=(unit, end))
                .next_back()
                .filter(|(_, e)| **e >= start)
                .map(|((_, s), e)| (*s, *e));
            let Some((s, e)) = touching else { break };
            self.partial.remove(&(unit, s));
            start = start.min(s);
            end = end.max(e);
        }
        self.partial.insert((unit, start), end);
    }

    /// Records that `unit` has `records` records (ignored below the watermark).
    pub fn insert_end(&mut self, unit: u64, records: u64) {
        if unit >= self.watermark {
            self.ends.insert(unit, records);
        }
    }

    /// Adds everything an element's origin names.
    pub fn insert_origin(&mut self, origin: &Origin) {
        for r in &origin.runs {
            self.insert(*r);
        }
        for (u, n) in &origin.unit_ends {
            self.insert_end(*u, *n);
        }
    }

    /// Adds every record of `other` (a union; `other`'s ends too).
    pub fn union(&mut self, other: &RecordSet) {
        if other.watermark > self.watermark {
            self.raise_watermark(other.watermark);
        }
        for r in other.runs() {
            self.insert(r);
        }
        for (u, n) in &other.ends {
            self.insert_end(*u, *n);
        }
    }

    /// Raises the watermark to `w` (every unit below `w` counts as whole),
    /// dropping what it covers.
    pub fn raise_watermark(&mut self, w: u64) {
        if w <= self.watermark {
            return;
        }
        self.watermark = w;
        self.partial = self.partial.split_off(&(w, 0));
        self.ends = self.ends.split_off(&w);
    }

    /// Whether every record of `unit` is in the set, by `rule` for a unit with no
    /// reported end.
    pub fn unit_complete(&self, unit: u64, rule: UnitRecords) -> bool {
        if unit < self.watermark {
            return true;
        }
        let records = match (self.ends.get(&unit), rule) {
            (Some(n), _) => *n,
            (None, UnitRecords::One) => 1,
            (None, UnitRecords::Counted) => return false,
        };
        if records == 0 {
            return true;
        }
        self.partial.get(&(unit, 0)).is_some_and(|end| *end >= records)
    }

    /// Moves the watermark over every whole unit at it; returns the new watermark.
    pub fn advance(&mut self, rule: UnitRecords) -> u64 {
        let mut w = self.watermark;
        while self.unit_complete(w, rule) {
            w += 1;
        }
        self.raise_watermark(w);
        w
    }

    pub fn contains(&self, unit: u64, record: u64) -> bool {
        if unit < self.watermark {
            return true;
        }
        self.partial
            .range((unit, 0)..=(unit, record))
            .next_back()
            .is_some_and(|(_, end)| *end > record)
    }

    /// The record count reported for `unit`, if any (units above the watermark).
    pub fn unit_end(&self, unit: u64) -> Option<u64> {
        self.ends.get(&unit).copied()
    }

    /// Every held range above the watermark, as runs in (unit, first) order.
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.partial.iter().map(|((unit, s), e)| Run { unit: *unit, first: *s, count: e - s })
    }

    /// Held (unit, records) ends above the watermark.
    pub fn ends(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ends.iter().map(|(u, n)| (*u, *n))
    }

    /// The consumed runs of units in `[begin, end)`: what a re-read of those
    /// units must skip. Units below the watermark are not listed (the caller
    /// does not hand them out).
    pub fn runs_in(&self, begin: u64, end: u64) -> Vec<Run> {
        let begin = begin.max(self.watermark);
        if begin >= end {
            return vec![];
        }
        self.partial
            .range((begin, 0)..(end, 0))
            .map(|((unit, s), e)| Run { unit: *unit, first: *s, count: e - s })
            .collect()
    }

    /// Rebuilds a set from its parts (decoding); runs and ends below the
    /// watermark are dropped.
    pub fn from_parts(
        watermark: u64,
        runs: impl IntoIterator<Item = Run>,
        ends: impl IntoIterator<Item = (u64, u64)>,
    ) -> Self {
        let mut set = RecordSet::below(watermark);
        for r in runs {
            set.insert(r);
        }
        for (u, n) in ends {
            set.insert_end(u, n);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(unit: u64, first: u64, count: u64) -> Run {
        Run { unit, first, count }
    }

    #[test]
    fn overlapping_and_touching_ranges_merge() {
        let mut s = RecordSet::new();
        s.insert(run(3, 5, 2)); // [5,7)
        s.insert(run(3, 0, 2)); // [0,2)
        s.insert(run(3, 2, 3)); // [2,5) touches both
        assert_eq!(s.runs().collect::<Vec<_>>(), vec![run(3, 0, 7)]);
        s.insert(run(3, 10, 1));
        s.insert(run(3, 4, 8)); // overlaps [0,7) and [10,11)
        assert_eq!(s.runs().collect::<Vec<_>>(), vec![run(3, 0, 12)]);
        assert!(s.contains(3, 11) && !s.contains(3, 12) && !s.contains(4, 0));
    }

    #[test]
    fn watermark_advances_over_whole_units_only() {
        let mut s = RecordSet::new();
        s.insert(run(0, 0, 1));
        s.insert(run(2, 0, 1));
        assert_eq!(s.advance(UnitRecords::One), 1, "unit 1 is missing");
        s.insert(run(1, 0, 1));
        assert_eq!(s.advance(UnitRecords::One), 3);
        assert_eq!(s.run_count(), 0, "whole units fold into the watermark");
    }

    #[test]
    fn counted_units_need_their_end() {
        let mut s = RecordSet::new();
        s.insert(run(0, 0, 4));
        assert_eq!(s.advance(UnitRecords::Counted), 0, "the end is not known yet");
        s.insert_end(0, 5);
        assert_eq!(s.advance(UnitRecords::Counted), 0, "record 4 is missing");
        s.insert(run(0, 4, 1));
        s.insert_end(1, 0); // an empty file is whole at once
        assert_eq!(s.advance(UnitRecords::Counted), 2);
    }

    #[test]
    fn union_takes_the_higher_watermark_and_all_runs() {
        let mut a = RecordSet::from_parts(5, [run(6, 0, 1)], []);
        let b = RecordSet::from_parts(3, [run(4, 0, 1), run(7, 0, 1)], [(8, 3)]);
        a.union(&b);
        assert_eq!(a.watermark(), 5);
        assert_eq!(a.runs().collect::<Vec<_>>(), vec![run(6, 0, 1), run(7, 0, 1)]);
        assert_eq!(a.unit_end(8), Some(3));
        assert_eq!(a.runs_in(0, 7), vec![run(6, 0, 1)]);
    }

    #[test]
    fn the_serialised_form_is_the_per_unit_layout() {
        // The layout journals and snapshots hold (state layout version 2).
        #[derive(Serialize, Deserialize)]
        struct PerUnit {
            watermark: u64,
            partial: BTreeMap<u64, BTreeMap<u64, u64>>,
            ends: BTreeMap<u64, u64>,
        }
        let set = RecordSet::from_parts(2, [run(3, 0, 2), run(3, 5, 1), run(4, 0, 1)], [(9, 3)]);
        let json = serde_json::to_string(&set).unwrap();
        let per_unit = PerUnit {
            watermark: 2,
            partial: BTreeMap::from([
                (3, BTreeMap::from([(0, 2), (5, 6)])),
                (4, BTreeMap::from([(0, 1)])),
            ]),
            ends: BTreeMap::from([(9, 3)]),
        };
        assert_eq!(json, serde_json::to_string(&per_unit).unwrap());
        assert_eq!(serde_json::from_str::<RecordSet>(&json).unwrap(), set);
        // A written state with touching or stale ranges reads back canonical.
        let odd = r#"{"watermark":2,"partial":{"1":{"0":1},"3":{"0":2,"2":4}},"ends":{}}"#;
        let read: RecordSet = serde_json::from_str(odd).unwrap();
        assert_eq!(read.runs().collect::<Vec<_>>(), vec![run(3, 0, 4)]);
    }

    #[test]
    fn units_held_and_lookups_see_each_unit_apart() {
        let mut s = RecordSet::below(5);
        s.insert(run(5, 2, 3)); // [2,5)
        s.insert(run(6, 0, 1));
        s.insert_end(7, 4);
        s.insert_end(5, 9);
        assert_eq!((s.units_held(), s.run_count()), (3, 2));
        assert!(s.contains(5, 4) && !s.contains(5, 5) && !s.contains(5, 1));
        assert!(!s.contains(6, 1) && s.contains(6, 0) && !s.contains(7, 0));
        assert_eq!(s.runs_in(6, 7), vec![run(6, 0, 1)]);
        s.insert(run(5, 0, 2)); // touches [2,5) from below
        assert!(s.unit_complete(6, UnitRecords::One) && !s.unit_complete(5, UnitRecords::Counted));
        s.insert(run(5, 5, 4));
        assert_eq!(s.advance(UnitRecords::Counted), 6, "unit 5 whole; 6 has no end");
        assert_eq!(s.advance(UnitRecords::One), 7, "as one record, 6 is whole; 7 is not");
        assert_eq!((s.units_held(), s.run_count()), (1, 0));
    }

    #[test]
    fn random_inserts_agree_with_a_set_of_records() {
        // A plain set of (unit, record) as the model; a fixed LCG for the inserts.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        let (mut set, mut model) = (RecordSet::below(2), std::collections::BTreeSet::new());
        for _ in 0..2000 {
            let r = run(next(8), next(20), 1 + next(4));
            set.insert(r);
            for rec in r.first..r.end() {
                if r.unit >= 2 {
                    model.insert((r.unit, rec));
                }
            }
        }
        for unit in 0..8 {
            for rec in 0..30 {
                let want = unit < 2 || model.contains(&(unit, rec));
                assert_eq!(set.contains(unit, rec), want, "({unit}, {rec})");
            }
        }
        let runs: Vec<Run> = set.runs().collect();
        let covered: u64 = runs.iter().map(|r| r.count).sum();
        assert_eq!(covered, model.len() as u64, "runs cover each record once");
        for w in runs.windows(2) {
            assert!(w[0].unit < w[1].unit || w[0].end() < w[1].first, "{w:?} touch");
        }
    }

    #[test]
    fn below_the_watermark_everything_is_contained() {
        let s = RecordSet::below(10);
        assert!(s.contains(9, 1_000));
        assert!(s.unit_complete(9, UnitRecords::Counted));
        assert!(!s.unit_complete(10, UnitRecords::One));
    }
}
