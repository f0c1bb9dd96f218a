//! Conversions between positions and their packed wire columns
//! (`proto/sluice.proto`, "positions"). Decoding checks shape and bounds and
//! never trusts a count from the peer to size an allocation.

use sluice_proto::v1 as pb;

use crate::error::PositionError;
use crate::limits::MAX_RUNS;
use crate::origin::{Origin, Run};
use crate::records::RecordSet;

fn malformed(m: impl Into<String>) -> PositionError {
    PositionError::Malformed(m.into())
}

/// Flattens runs into (unit, first, count) triples.
pub fn runs_to_flat(runs: impl IntoIterator<Item = Run>, out: &mut Vec<u64>) {
    for r in runs {
        out.extend([r.unit, r.first, r.count]);
    }
}

/// Reads (unit, first, count) triples; refuses a ragged column, a zero count, a
/// range past u64 or more than [`MAX_RUNS`] runs.
pub fn runs_from_flat(flat: &[u64]) -> Result<Vec<Run>, PositionError> {
    if !flat.len().is_multiple_of(3) {
        return Err(malformed(format!("{} run numbers is not a multiple of 3", flat.len())));
    }
    if flat.len() / 3 > MAX_RUNS {
        return Err(malformed(format!("{} runs, above the limit of {MAX_RUNS}", flat.len() / 3)));
    }
    flat.chunks_exact(3)
        .map(|c| {
            let run = Run { unit: c[0], first: c[1], count: c[2] };
            if run.count == 0 || run.first.checked_add(run.count).is_none() {
                return Err(malformed(format!("invalid run {run:?}")));
            }
            Ok(run)
        })
        .collect()
}

/// Reads `(begin, count)` span pairs (`ConsumedReport.firsts`); refuses a
/// ragged column, an empty span, a span past u64 or more than [`MAX_RUNS`].
pub fn spans_from_flat(flat: &[u64]) -> Result<Vec<(u64, u64)>, PositionError> {
    if !flat.len().is_multiple_of(2) {
        return Err(malformed(format!("{} span numbers is not a multiple of 2", flat.len())));
    }
    let spans = ends_from_flat(flat)?;
    if let Some((b, n)) = spans.iter().find(|(b, n)| *n == 0 || b.checked_add(*n).is_none()) {
        return Err(malformed(format!("invalid span of first records: {n} units from unit {b}")));
    }
    Ok(spans)
}

pub fn ends_to_flat(ends: impl IntoIterator<Item = (u64, u64)>, out: &mut Vec<u64>) {
    for (u, n) in ends {
        out.extend([u, n]);
    }
}

pub fn ends_from_flat(flat: &[u64]) -> Result<Vec<(u64, u64)>, PositionError> {
    if !flat.len().is_multiple_of(2) {
        return Err(malformed(format!("{} unit-end numbers is not a multiple of 2", flat.len())));
    }
    if flat.len() / 2 > MAX_RUNS {
        return Err(malformed(format!("{} unit ends, above the limit", flat.len() / 2)));
    }
    Ok(flat.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

impl Origin {
    pub fn to_pb(&self) -> pb::Origin {
        let mut runs = Vec::with_capacity(self.runs.len() * 3);
        runs_to_flat(self.runs.iter().copied(), &mut runs);
        let mut unit_ends = Vec::with_capacity(self.unit_ends.len() * 2);
        ends_to_flat(self.unit_ends.iter().copied(), &mut unit_ends);
        pb::Origin { runs, unit_ends }
    }

    pub fn from_pb(o: &pb::Origin) -> Result<Origin, PositionError> {
        Ok(Origin { runs: runs_from_flat(&o.runs)?, unit_ends: ends_from_flat(&o.unit_ends)? })
    }
}

impl RecordSet {
    /// The wire form: spans of first records as `firsts` (Position format 2),
    /// the other units' ranges as `runs`; a set without spans is format 1.
    pub fn to_pb(&self) -> pb::ConsumedRecords {
        let mut runs = Vec::new();
        runs_to_flat(self.ranges(), &mut runs);
        let mut unit_ends = Vec::new();
        ends_to_flat(self.ends(), &mut unit_ends);
        let mut firsts = Vec::new();
        ends_to_flat(self.first_spans().map(|(b, e)| (b, e - b)), &mut firsts);
        pb::ConsumedRecords { watermark: self.watermark(), runs, unit_ends, firsts }
    }

    /// Refuses what [`runs_from_flat`] and [`spans_from_flat`] refuse, and
    /// more than [`MAX_RUNS`] units held in runs and spans together: a span is
    /// one entry here, but the dispatcher's persisted form lists its units one by
    /// one, so the bound of format 1 (one run per unit) is kept.
    pub fn from_pb(c: &pb::ConsumedRecords) -> Result<RecordSet, PositionError> {
        let runs = runs_from_flat(&c.runs)?;
        let spans = spans_from_flat(&c.firsts)?;
        let units = spans.iter().try_fold(runs.len() as u64, |n, (_, count)| n.checked_add(*count));
        if units.is_none_or(|n| n > MAX_RUNS as u64) {
            return Err(malformed(format!(
                "{} runs and {} spans hold more than {MAX_RUNS} units",
                runs.len(),
                spans.len()
            )));
        }
        let mut set = RecordSet::from_parts(c.watermark, runs, ends_from_flat(&c.unit_ends)?);
        for (begin, count) in spans {
            set.insert_firsts(begin, count);
        }
        Ok(set)
    }
}

/// The origins of a message's elements, flat: element `i`'s runs are
/// `runs[bounds[i]..bounds[i + 1]]`. One allocation per message, not one per
/// element (a reader takes elements one by one, at up to a million a second).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElementOrigins {
    runs: Vec<Run>,
    /// `elements + 1` offsets into `runs`, from 0 (empty when no element).
    bounds: Vec<usize>,
}

impl ElementOrigins {
    /// How many elements it has origins for.
    pub fn len(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i`'s runs (empty past the end).
    pub fn runs_of(&self, i: usize) -> &[Run] {
        match (self.bounds.get(i), self.bounds.get(i + 1)) {
            (Some(a), Some(b)) => &self.runs[*a..*b],
            _ => &[],
        }
    }

    /// Element `i`'s origin, as its own value.
    pub fn origin(&self, i: usize) -> Origin {
        Origin { runs: self.runs_of(i).to_vec(), unit_ends: vec![] }
    }
}

/// Splits a batch's `Positions` columns into the origins of its elements plus
/// the message's own (the last, records dropped after the last element, and the
/// unit ends). Refuses columns that do not match `elements`.
pub fn split_positions(
    p: &pb::Positions,
    elements: usize,
) -> Result<(ElementOrigins, Origin), PositionError> {
    if p.runs_per_element.len() != elements + 1 {
        return Err(malformed(format!(
            "{} run counts for {elements} elements (want one per element and one for the message)",
            p.runs_per_element.len()
        )));
    }
    let runs = runs_from_flat(&p.runs)?;
    let total: u64 = p.runs_per_element.iter().map(|n| u64::from(*n)).sum();
    if total != runs.len() as u64 {
        return Err(malformed(format!(
            "run counts add up to {total}, and the message has {} runs",
            runs.len()
        )));
    }
    let mut bounds = Vec::with_capacity(elements + 1);
    bounds.push(0);
    let mut at = 0usize;
    for n in &p.runs_per_element[..elements] {
        at += *n as usize;
        bounds.push(at);
    }
    let mut runs = runs;
    let message = Origin { runs: runs.split_off(at), unit_ends: ends_from_flat(&p.unit_ends)? };
    Ok((ElementOrigins { runs, bounds }, message))
}

/// Builds a batch's `Positions` from its elements' origins (taken out of them)
/// and the message's own origin.
pub fn join_positions(
    per_element: impl IntoIterator<Item = Origin>,
    message: Origin,
) -> pb::Positions {
    let mut p = pb::Positions::default();
    let mut ends = Vec::new();
    for o in per_element {
        p.runs_per_element.push(o.runs.len() as u32);
        runs_to_flat(o.runs, &mut p.runs);
        ends.extend(o.unit_ends);
    }
    p.runs_per_element.push(message.runs.len() as u32);
    runs_to_flat(message.runs, &mut p.runs);
    ends.extend(message.unit_ends);
    ends_to_flat(ends, &mut p.unit_ends);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_per_element() {
        let a =
            Origin { runs: vec![Run::record(1, 0), Run::record(2, 0)], unit_ends: vec![(1, 1)] };
        let b = Origin::record(7, 3);
        let msg = Origin { runs: vec![Run::record(9, 0)], unit_ends: vec![(9, 4)] };
        let p = join_positions([a.clone(), b.clone()], msg);
        let (per, message) = split_positions(&p, 2).unwrap();
        assert_eq!(per.len(), 2);
        assert_eq!(per.runs_of(0), a.runs);
        assert_eq!(per.origin(1), b);
        assert!(per.runs_of(2).is_empty());
        assert_eq!(message.runs, vec![Run::record(9, 0)]);
        assert_eq!(message.unit_ends, vec![(1, 1), (9, 4)], "ends travel with the message");
    }

    #[test]
    fn ragged_or_lying_columns_are_refused() {
        let p = pb::Positions { runs_per_element: vec![1, 0], runs: vec![1, 0], unit_ends: vec![] };
        assert!(split_positions(&p, 1).is_err(), "ragged triple");
        let p =
            pb::Positions { runs_per_element: vec![2, 0], runs: vec![1, 0, 1], unit_ends: vec![] };
        assert!(split_positions(&p, 1).is_err(), "counts add up to more runs than sent");
        let p = pb::Positions { runs_per_element: vec![0], runs: vec![], unit_ends: vec![] };
        assert!(split_positions(&p, 1).is_err(), "one count short");
        assert!(runs_from_flat(&[1, u64::MAX, 2]).is_err(), "overflowing run");
        assert!(runs_from_flat(&[1, 0, 0]).is_err(), "empty run");
    }
}
