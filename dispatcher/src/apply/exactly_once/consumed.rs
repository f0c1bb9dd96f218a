//! `ReportConsumed`: what one consumer consumed since its last answered report.
//!
//! The records go into the iteration's consumed set, whose watermark then
//! advances over whole units (by the job's rule), and into the per-generation
//! record that checkpoint watermarks are answered from
//! (`Progress::checkpoint`). The lost tasks it lists are acknowledged: the
//! consumer dropped what it held of them, and reported what it consumed of
//! them. The report that completes the iteration (every unit consumed, every
//! task ended) finishes it. Everything here is a union or a removal, so a report applied twice
//! (a heartbeat resent after a lost answer) changes nothing the second time.

use std::collections::BTreeSet;

use sluice_positions::{RecordSet, Run};

use crate::command::Response;
use crate::error::StateError;
use crate::exactly_once::MAX_REPORT_RUNS;
use crate::state::{ClientId, State, TaskId};

/// The records of one report: runs, spans of first records `(begin, count)`
/// (record 0 of each unit of the span) and unit ends.
#[derive(Clone, Copy)]
pub(crate) struct Reported<'a> {
    pub runs: &'a [Run],
    pub firsts: &'a [(u64, u64)],
    pub unit_ends: &'a [(u64, u64)],
}

impl Reported<'_> {
    /// Adds the records to `set`.
    pub(crate) fn insert_into(&self, set: &mut RecordSet) {
        set.insert_records(self.runs, self.firsts, self.unit_ends);
    }

    /// The highest unit named, if any.
    fn last_unit(&self) -> Option<u64> {
        let runs = self.runs.iter().map(|r| r.unit);
        let spans = self.firsts.iter().map(|(b, n)| b.saturating_add(n.saturating_sub(1)));
        runs.chain(spans).chain(self.unit_ends.iter().map(|e| e.0)).max()
    }
}

pub(crate) fn report(
    state: &mut State,
    client_id: ClientId,
    generation: u64,
    records: Reported<'_>,
    lost_tasks_done: &[TaskId],
) -> Result<Response, StateError> {
    let Reported { runs, firsts, unit_ends } = records;
    for (what, n) in [
        ("runs", runs.len()),
        ("spans of first records", firsts.len()),
        ("unit ends", unit_ends.len()),
        ("lost tasks", lost_tasks_done.len()),
    ] {
        if n > MAX_REPORT_RUNS {
            return Err(StateError::InvalidArgument(format!(
                "a consumed report carries {n} {what}, above the limit of {MAX_REPORT_RUNS}; \
                 send the rest in the next heartbeat"
            )));
        }
    }
    let iteration_id = *state.clients.get(&client_id).ok_or_else(|| {
        StateError::not_found_hint("iteration client", client_id, "; it was released")
    })?;
    let cardinality = state.job_of(iteration_id).and_then(|j| state.source_cardinality_of(j.id));
    if let Some(n) = cardinality {
        if let Some(unit) = records.last_unit().filter(|u| *u >= n) {
            return Err(StateError::InvalidArgument(format!(
                "client {client_id} reported unit {unit} consumed, and the source has {n} units; \
                 a report names only units of elements read from this iteration"
            )));
        }
    }
    if let Some(r) = runs.iter().find(|r| r.first.checked_add(r.count).is_none()) {
        return Err(StateError::InvalidArgument(format!("invalid consumed run {r:?}")));
    }
    if let Some((b, n)) = firsts.iter().find(|(b, n)| *n == 0 || b.checked_add(*n).is_none()) {
        return Err(StateError::InvalidArgument(format!(
            "invalid span of first records: {n} units from unit {b}"
        )));
    }
    let shape = super::ordered::Shape::of(state, iteration_id);
    let p = state.exactly_once.iterations.get_mut(&iteration_id).ok_or_else(|| {
        StateError::FailedPrecondition(format!(
            "iteration {iteration_id} is not exactly-once (its job was created without \
             require_exactly_once): its consumers send no consumed reports"
        ))
    })?;
    records.insert_into(&mut p.consumed);
    p.consumed.advance(p.rule);
    let g = p.client_generations.entry(client_id).or_insert(generation);
    *g = (*g).max(generation);
    p.record_generation(generation, |set| records.insert_into(set));
    let done: BTreeSet<TaskId> = lost_tasks_done.iter().copied().collect();
    for o in &mut p.orphans {
        if done.contains(&o.task_id) {
            o.waiting.remove(&client_id);
        }
    }
    let watermark = p.consumed.watermark();
    p.trim_granted(|unit| shape.as_ref().is_some_and(|s| s.may_be_awaited(unit, watermark)));
    // The last consumption can be what completes an exactly-once iteration.
    let complete = state
        .iterations
        .get(&iteration_id)
        .is_some_and(|it| it.is_live() && state.iteration_complete(it));
    if let Some(it) = state.iterations.get_mut(&iteration_id).filter(|_| complete) {
        it.finished = true;
    }
    Ok(Response::ConsumedReported)
}
