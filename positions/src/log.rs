//! [`ConsumedLog`]: consumed records in the order a reader took them, coalesced
//! as they arrive, for a consumed report or a later fold into a [`RecordSet`].
//!
//! Why not an [`Origin`]: a reader of one-element units takes record 0 of unit
//! u, then of u + 1, ...: as runs, one per element, which the report carries
//! and the dispatcher applies one by one (docs/performance.md, "Exactly once").
//! Here such records extend a span of units instead, so a report and its
//! application cost one entry per span.

use crate::origin::{Origin, Run};
use crate::records::RecordSet;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumedLog {
    /// Runs other than a unit's record 0 alone; consecutive ones coalesced.
    pub runs: Vec<Run>,
    /// `(begin, count)`: record 0 of each unit of `[begin, begin + count)`.
    pub firsts: Vec<(u64, u64)>,
    /// (unit, records) of units whose every record was produced.
    pub unit_ends: Vec<(u64, u64)>,
}

impl ConsumedLog {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.firsts.is_empty() && self.unit_ends.is_empty()
    }

    /// Entries held (runs, spans and ends).
    pub fn len(&self) -> usize {
        self.runs.len() + self.firsts.len() + self.unit_ends.len()
    }

    /// Appends a run: record 0 alone extends the last span when it continues it.
    pub fn push_run(&mut self, run: Run) {
        if run.count == 0 {
            return;
        }
        if run.first == 0 && run.count == 1 {
            match self.firsts.last_mut() {
                Some((b, n)) if b.checked_add(*n) == Some(run.unit) => *n += 1,
                _ => self.firsts.push((run.unit, 1)),
            }
            return;
        }
        // Record 1 of the last span's last unit: that unit's records become a
        // run from 0 (a unit of many records read in order stays one run).
        let mut run = run;
        if run.first == 1 {
            if let Some((b, n)) = self.firsts.last_mut() {
                if b.checked_add(*n) == run.unit.checked_add(1) {
                    *n -= 1;
                    if *n == 0 {
                        self.firsts.pop();
                    }
                    run = Run { unit: run.unit, first: 0, count: run.count.saturating_add(1) };
                }
            }
        }
        match self.runs.last_mut() {
            Some(last) if last.unit == run.unit && last.end() == run.first => {
                last.count = last.count.saturating_add(run.count);
            }
            _ => self.runs.push(run),
        }
    }

    /// Appends everything `origin` names.
    pub fn push_origin(&mut self, origin: &Origin) {
        self.push(&origin.runs, &origin.unit_ends);
    }

    /// Appends runs and unit ends.
    pub fn push(&mut self, runs: &[Run], unit_ends: &[(u64, u64)]) {
        for r in runs {
            self.push_run(*r);
        }
        self.unit_ends.extend_from_slice(unit_ends);
    }

    /// Takes at most `max` entries of each column from the front, leaving the
    /// rest.
    pub fn take_front(&mut self, max: usize) -> ConsumedLog {
        fn front<T>(v: &mut Vec<T>, max: usize) -> Vec<T> {
            let rest = v.split_off(max.min(v.len()));
            std::mem::replace(v, rest)
        }
        ConsumedLog {
            runs: front(&mut self.runs, max),
            firsts: front(&mut self.firsts, max),
            unit_ends: front(&mut self.unit_ends, max),
        }
    }

    /// Whether a column holds more than `max` entries.
    pub fn exceeds(&self, max: usize) -> bool {
        self.runs.len() > max || self.firsts.len() > max || self.unit_ends.len() > max
    }

    /// Drops what lies below `watermark` (every unit there is whole anyway).
    pub fn prune_below(&mut self, watermark: u64) {
        self.runs.retain(|r| r.unit >= watermark);
        self.unit_ends.retain(|(u, _)| *u >= watermark);
        self.firsts.retain_mut(|(b, n)| {
            let end = b.saturating_add(*n);
            if end <= watermark {
                return false;
            }
            if *b < watermark {
                *n = end - watermark;
                *b = watermark;
            }
            true
        });
    }

    /// Adds every entry to `set`.
    pub fn insert_into(&self, set: &mut RecordSet) {
        set.insert_records(&self.runs, &self.firsts, &self.unit_ends);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_records_of_consecutive_units_are_one_span() {
        let mut log = ConsumedLog::default();
        for u in 10..20 {
            log.push_run(Run::record(u, 0));
        }
        log.push_run(Run::record(30, 0));
        log.push_run(Run::record(30, 1)); // unit 30 has more: a run from record 0
        log.push_run(Run::record(30, 2));
        log.push_run(Run::record(40, 1)); // alone
        assert_eq!(log.firsts, vec![(10, 10)]);
        assert_eq!(log.runs, vec![Run { unit: 30, first: 0, count: 3 }, Run::record(40, 1)]);
        let mut set = RecordSet::new();
        log.insert_into(&mut set);
        assert_eq!(set.advance(crate::UnitRecords::One), 0);
        assert!(set.contains(19, 0) && set.contains(30, 2) && !set.contains(20, 0));
        assert!(set.contains(40, 1) && !set.contains(40, 0));
    }

    #[test]
    fn the_front_is_taken_per_column_and_pruning_cuts_spans() {
        let mut log = ConsumedLog::default();
        for u in [1, 2, 5, 6, 9] {
            log.push_run(Run::record(u, 0));
        }
        log.push_run(Run::record(9, 3));
        log.unit_ends.push((9, 4));
        let head = log.take_front(2);
        assert_eq!(head.firsts, vec![(1, 2), (5, 2)]);
        assert_eq!(log.firsts, vec![(9, 1)]);
        let mut joined = head.clone();
        joined.push_run(Run::record(3, 0));
        assert_eq!(joined.firsts, vec![(1, 2), (5, 2), (3, 1)]);
        joined.prune_below(6);
        assert_eq!(joined.firsts, vec![(6, 1)]);
        assert_eq!(joined.len(), 3, "the run and the end of unit 9 stay");
    }
}
