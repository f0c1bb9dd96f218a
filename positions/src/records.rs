//! [`RecordSet`]: the consumed records of one iteration's source, kept small by a
//! watermark (every unit below it whole) and per-unit record ranges above it.
//!
//! Its size is bounded by the units in flight (granted and not yet whole), not by
//! the epoch: [`RecordSet::advance`] folds every whole unit at the watermark into
//! it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::origin::Run;

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
/// units (docs/performance.md, "Exactly once").
///
/// Why `firsts` beside it: a unit of one element (`range`, `from_tensor_slices`)
/// is consumed as its record 0 alone, and consecutive units arrive together, so
/// a span of units whose only consumed record is record 0 is one entry, and a
/// report of a span (`insert_firsts`) costs one insert, not one per element.
/// A unit is in at most one of the two maps: `partial` never holds a unit whose
/// only range is `[0, 1)` (that unit is in a span), so the representation of a
/// set is unique and `==` compares sets.
///
/// The persisted and serialised form stays the per-unit one ([`Layout`]), so
/// journals and snapshots written before read the same.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Layout", into = "Layout")]
pub struct RecordSet {
    /// Every unit below this is consumed whole.
    watermark: u64,
    /// (unit (>= watermark), first) → end: each unit's consumed records as
    /// disjoint, non-touching `first → end` ranges.
    partial: BTreeMap<(u64, u64), u64>,
    /// begin → end: disjoint, non-touching spans of units (>= watermark) whose
    /// consumed records are exactly record 0.
    firsts: BTreeMap<u64, u64>,
    /// unit (>= watermark) → how many records it has, where reported.
    ends: BTreeMap<u64, u64>,
}

/// The serialised form of a [`RecordSet`] (state layout version 2,
/// `dispatcher/src/raft/versioned.rs`): its fields in this order, the ranges
/// grouped per unit (a span's units each as `{0: 1}`).
#[derive(Serialize, Deserialize)]
struct Layout {
    watermark: u64,
    partial: BTreeMap<u64, BTreeMap<u64, u64>>,
    ends: BTreeMap<u64, u64>,
}

impl From<RecordSet> for Layout {
    fn from(s: RecordSet) -> Self {
        let mut partial: BTreeMap<u64, BTreeMap<u64, u64>> = BTreeMap::new();
        for r in s.runs() {
            partial.entry(r.unit).or_default().insert(r.first, r.end());
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

    /// Number of record ranges and unit spans held above the watermark (what
    /// bounds its size in memory).
    pub fn run_count(&self) -> usize {
        self.partial.len() + self.firsts.len()
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
        let spans: u64 = self.firsts.iter().map(|(b, e)| e - b).sum();
        let bare = self.ends.keys().filter(|u| !self.has_records(**u)).count();
        units + spans as usize + bare
    }

    /// Whether `unit` has consumed records held (above the watermark).
    fn has_records(&self, unit: u64) -> bool {
        self.in_firsts(unit) || self.has_partial(unit)
    }

    fn has_partial(&self, unit: u64) -> bool {
        self.partial.range((unit, 0)..=(unit, u64::MAX)).next().is_some()
    }

    /// The span holding `unit`, if any.
    fn span_of(&self, unit: u64) -> Option<(u64, u64)> {
        self.firsts.range(..=unit).next_back().filter(|(_, e)| **e > unit).map(|(b, e)| (*b, *e))
    }

    fn in_firsts(&self, unit: u64) -> bool {
        self.span_of(unit).is_some()
    }

    /// Adds `run` (ignored below the watermark).
    pub fn insert(&mut self, run: Run) {
        if run.count == 0 || run.unit < self.watermark {
            return;
        }
        let unit = run.unit;
        if run.first == 0 && run.count == 1 && !self.has_partial(unit) {
            self.add_span(unit, unit + 1);
            return;
        }
        let (mut start, mut end) = (run.first, run.end());
        if let Some((b, e)) = self.span_of(unit) {
            // The unit leaves its span: its records are more than record 0 now.
            self.remove_from_span(b, e, unit);
            self.partial.insert((unit, 0), 1);
        }
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

    /// Adds record 0 of every unit in `[begin, begin + count)` (the part at or
    /// above the watermark): what consecutive one-element units report.
    pub fn insert_firsts(&mut self, begin: u64, count: u64) {
        let end = begin.saturating_add(count);
        let begin = begin.max(self.watermark);
        if begin >= end {
            return;
        }
        // Units of the span with other records take record 0 into their ranges;
        // the gaps between them join the spans.
        let mut with_ranges: Vec<u64> =
            self.partial.range((begin, 0)..(end, 0)).map(|((u, _), _)| *u).collect();
        with_ranges.dedup();
        let mut from = begin;
        for u in with_ranges {
            self.add_span(from, u);
            self.insert(Run::record(u, 0));
            from = u + 1;
        }
        self.add_span(from, end);
    }

    /// Adds the span `[begin, end)` of units without partial ranges, merging
    /// spans it overlaps or touches.
    fn add_span(&mut self, begin: u64, end: u64) {
        if begin >= end {
            return;
        }
        let (mut b, mut e) = (begin, end);
        if let Some((pb, pe)) = self.firsts.range(..=b).next_back().map(|(s, t)| (*s, *t)) {
            if pe >= b {
                if pe >= e {
                    return;
                }
                b = pb;
                // The common case: the span continues the one before it and
                // reaches no other.
                if self.firsts.range(pb + 1..=e).next().is_none() {
                    self.firsts.insert(pb, e);
                    return;
                }
                e = e.max(pe);
            }
        }
        let covered: Vec<(u64, u64)> = self.firsts.range(b..=e).map(|(s, t)| (*s, *t)).collect();
        for (s, t) in covered {
            self.firsts.remove(&s);
            e = e.max(t);
        }
        self.firsts.insert(b, e);
    }

    fn remove_from_span(&mut self, b: u64, e: u64, unit: u64) {
        self.firsts.remove(&b);
        if b < unit {
            self.firsts.insert(b, unit);
        }
        if unit + 1 < e {
            self.firsts.insert(unit + 1, e);
        }
    }

    /// Records that `unit` has `records` records (ignored below the watermark).
    pub fn insert_end(&mut self, unit: u64, records: u64) {
        if unit >= self.watermark {
            self.ends.insert(unit, records);
        }
    }

    /// Adds runs, spans of first records `(begin, count)` and unit ends: a
    /// consumed report's records (the reader's log and the dispatcher's command).
    pub fn insert_records(&mut self, runs: &[Run], firsts: &[(u64, u64)], ends: &[(u64, u64)]) {
        for r in runs {
            self.insert(*r);
        }
        for (b, n) in firsts {
            self.insert_firsts(*b, *n);
        }
        for (u, n) in ends {
            self.insert_end(*u, *n);
        }
    }

    /// Adds every record of `other` (a union; `other`'s ends too).
    pub fn union(&mut self, other: &RecordSet) {
        if other.watermark > self.watermark {
            self.raise_watermark(other.watermark);
        }
        for ((unit, s), e) in &other.partial {
            self.insert(Run { unit: *unit, first: *s, count: e - s });
        }
        for (b, e) in &other.firsts {
            self.insert_firsts(*b, e - b);
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
        let straddling = self.span_of(w).filter(|(b, _)| *b < w);
        self.firsts = self.firsts.split_off(&w);
        if let Some((_, e)) = straddling {
            self.firsts.insert(w, e);
        }
    }

    /// How many records `unit` has by its reported end or `rule` (`None`:
    /// unknown).
    fn records_of(&self, unit: u64, rule: UnitRecords) -> Option<u64> {
        match (self.ends.get(&unit), rule) {
            (Some(n), _) => Some(*n),
            (None, UnitRecords::One) => Some(1),
            (None, UnitRecords::Counted) => None,
        }
    }

    /// Whether every record of `unit` is in the set, by `rule` for a unit with no
    /// reported end.
    pub fn unit_complete(&self, unit: u64, rule: UnitRecords) -> bool {
        if unit < self.watermark {
            return true;
        }
        match self.records_of(unit, rule) {
            None => false,
            Some(0) => true,
            Some(1) if self.in_firsts(unit) => true,
            Some(records) => self.partial.get(&(unit, 0)).is_some_and(|end| *end >= records),
        }
    }

    /// Moves the watermark over every whole unit at it; returns the new watermark.
    pub fn advance(&mut self, rule: UnitRecords) -> u64 {
        let mut w = self.watermark;
        loop {
            // A span of one-record units is whole up to its first unit with an
            // end above 1 (or, counted, without an end): one step for the span.
            if let Some((_, e)) = self.span_of(w) {
                let stop = match rule {
                    UnitRecords::One => {
                        self.ends.range(w..e).find(|(_, n)| **n > 1).map(|(u, _)| *u)
                    }
                    UnitRecords::Counted => {
                        (w..e).find(|u| self.ends.get(u).is_none_or(|n| *n > 1))
                    }
                };
                match stop {
                    Some(u) => {
                        w = u;
                        break;
                    }
                    None => {
                        w = e;
                        continue;
                    }
                }
            }
            if !self.unit_complete(w, rule) {
                break;
            }
            w += 1;
        }
        self.raise_watermark(w);
        w
    }

    pub fn contains(&self, unit: u64, record: u64) -> bool {
        if unit < self.watermark {
            return true;
        }
        if record == 0 && self.in_firsts(unit) {
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

    /// Every held range above the watermark, as runs in (unit, first) order
    /// (a span's units one run each).
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        merge_runs(self.partial_runs(0, u64::MAX), self.first_runs(0, u64::MAX))
    }

    /// The held ranges of units not in a span (what `runs` lists besides the
    /// spans' units), in (unit, first) order.
    pub fn ranges(&self) -> impl Iterator<Item = Run> + '_ {
        self.partial_runs(0, u64::MAX)
    }

    /// Whether any unit is held in a span of first records.
    pub fn has_spans(&self) -> bool {
        !self.firsts.is_empty()
    }

    /// Spans `(begin, end)` of units whose only consumed record is record 0.
    pub fn first_spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.firsts.iter().map(|(b, e)| (*b, *e))
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
        merge_runs(self.partial_runs(begin, end), self.first_runs(begin, end)).collect()
    }

    fn partial_runs(&self, begin: u64, end: u64) -> impl Iterator<Item = Run> + '_ {
        let range = if end == u64::MAX {
            self.partial.range((begin, 0)..)
        } else {
            self.partial.range((begin, 0)..(end, 0))
        };
        range.map(|((unit, s), e)| Run { unit: *unit, first: *s, count: e - s })
    }

    /// Record 0 of every span unit in `[begin, end)`.
    fn first_runs(&self, begin: u64, end: u64) -> impl Iterator<Item = Run> + '_ {
        let straddling = self.span_of(begin).filter(|(b, _)| *b < begin);
        straddling
            .into_iter()
            .chain(self.firsts.range(begin..).map(|(b, e)| (*b, *e)))
            .map(move |(b, e)| (b.max(begin), e.min(end)))
            .take_while(move |(b, _)| *b < end)
            .flat_map(|(b, e)| (b..e).map(|u| Run::record(u, 0)))
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

/// Two runs iterators in (unit, first) order merged into one (they never hold
/// the same unit).
fn merge_runs(
    a: impl Iterator<Item = Run>,
    b: impl Iterator<Item = Run>,
) -> impl Iterator<Item = Run> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if (x.unit, x.first) <= (y.unit, y.first) => a.next(),
        (Some(_), Some(_)) => b.next(),
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}

#[cfg(test)]
#[path = "records_tests.rs"]
mod tests;
