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

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSet {
    /// Every unit below this is consumed whole.
    watermark: u64,
    /// unit (>= watermark) → its consumed records, as disjoint, non-touching
    /// `first → end` ranges.
    partial: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// unit (>= watermark) → how many records it has, where reported.
    ends: BTreeMap<u64, u64>,
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
        self.partial.values().map(BTreeMap::len).sum()
    }

    /// Units above the watermark with records or an end held.
    pub fn units_held(&self) -> usize {
        let mut n = self.partial.len();
        n += self.ends.keys().filter(|u| !self.partial.contains_key(u)).count();
        n
    }

    /// Adds `run` (ignored below the watermark).
    pub fn insert(&mut self, run: Run) {
        if run.count == 0 || run.unit < self.watermark {
            return;
        }
        let ranges = self.partial.entry(run.unit).or_default();
        let (mut start, mut end) = (run.first, run.end());
        // Merge with every range that overlaps or touches [start, end).
        let touching: Vec<(u64, u64)> = ranges
            .range(..=end)
            .rev()
            .take_while(|(_, e)| **e >= start)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in touching {
            ranges.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        ranges.insert(start, end);
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
        self.partial = self.partial.split_off(&w);
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
        self.partial.get(&unit).and_then(|r| r.get(&0)).is_some_and(|end| *end >= records)
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
            .get(&unit)
            .and_then(|r| r.range(..=record).next_back())
            .is_some_and(|(_, end)| *end > record)
    }

    /// The record count reported for `unit`, if any (units above the watermark).
    pub fn unit_end(&self, unit: u64) -> Option<u64> {
        self.ends.get(&unit).copied()
    }

    /// Every held range above the watermark, as runs in (unit, first) order.
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        self.partial.iter().flat_map(|(unit, ranges)| {
            ranges.iter().map(move |(s, e)| Run { unit: *unit, first: *s, count: e - s })
        })
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
            .range(begin..end)
            .flat_map(|(unit, ranges)| {
                ranges.iter().map(move |(s, e)| Run { unit: *unit, first: *s, count: e - s })
            })
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
    fn below_the_watermark_everything_is_contained() {
        let s = RecordSet::below(10);
        assert!(s.contains(9, 1_000));
        assert!(s.unit_complete(9, UnitRecords::Counted));
        assert!(!s.unit_complete(10, UnitRecords::One));
    }
}
