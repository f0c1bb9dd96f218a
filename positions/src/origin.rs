//! [`Origin`]: the records one element stands for, as a worker tags it.

use serde::{Deserialize, Serialize};

/// `count` consecutive records of one unit, from record `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Run {
    pub unit: u64,
    pub first: u64,
    pub count: u64,
}

impl Run {
    /// The single record `record` of `unit`.
    pub fn record(unit: u64, record: u64) -> Self {
        Run { unit, first: record, count: 1 }
    }

    /// One past the last record (saturating).
    pub fn end(&self) -> u64 {
        self.first.saturating_add(self.count)
    }
}

/// Where an element came from: the records it was made of (and records the
/// pipeline dropped just before it), and the record counts of units the pipeline
/// finished. Appending keeps runs coalesced where they touch, so an element of a
/// batch over consecutive records stays one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub runs: Vec<Run>,
    /// (unit, records) of units whose every record was produced.
    pub unit_ends: Vec<(u64, u64)>,
}

impl Origin {
    /// The origin of record `record` of `unit`.
    pub fn record(unit: u64, record: u64) -> Self {
        Origin { runs: vec![Run::record(unit, record)], unit_ends: vec![] }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.unit_ends.is_empty()
    }

    /// Appends a run, merging it into the last one when it continues it.
    pub fn push_run(&mut self, run: Run) {
        if run.count == 0 {
            return;
        }
        if let Some(last) = self.runs.last_mut() {
            if last.unit == run.unit && last.end() == run.first {
                last.count = last.count.saturating_add(run.count);
                return;
            }
        }
        self.runs.push(run);
    }

    pub fn push_end(&mut self, unit: u64, records: u64) {
        self.unit_ends.push((unit, records));
    }

    /// Moves everything of `other` into this origin (a batch of elements, or
    /// dropped records joining the next element).
    pub fn append(&mut self, other: Origin) {
        for r in other.runs {
            self.push_run(r);
        }
        self.unit_ends.extend(other.unit_ends);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_records_coalesce_into_one_run() {
        let mut o = Origin::record(4, 0);
        o.append(Origin::record(4, 1));
        o.append(Origin::record(4, 2));
        o.append(Origin::record(5, 0));
        assert_eq!(o.runs, vec![Run { unit: 4, first: 0, count: 3 }, Run::record(5, 0)]);
    }

    #[test]
    fn empty_runs_are_not_kept() {
        let mut o = Origin::default();
        o.push_run(Run { unit: 1, first: 0, count: 0 });
        assert!(o.is_empty());
    }
}
