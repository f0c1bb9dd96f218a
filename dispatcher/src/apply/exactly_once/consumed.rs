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

use sluice_positions::Run;

use crate::command::Response;
use crate::error::StateError;
use crate::exactly_once::MAX_REPORT_RUNS;
use crate::state::{ClientId, State, TaskId};

pub(crate) fn report(
    state: &mut State,
    client_id: ClientId,
    generation: u64,
    runs: &[Run],
    unit_ends: &[(u64, u64)],
    lost_tasks_done: &[TaskId],
) -> Result<Response, StateError> {
    for (what, n) in [
        ("runs", runs.len()),
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
        let bad =
            runs.iter().map(|r| r.unit).chain(unit_ends.iter().map(|e| e.0)).find(|u| *u >= n);
        if let Some(unit) = bad {
            return Err(StateError::InvalidArgument(format!(
                "client {client_id} reported unit {unit} consumed, and the source has {n} units; \
                 a report names only units of elements read from this iteration"
            )));
        }
    }
    if let Some(r) = runs.iter().find(|r| r.first.checked_add(r.count).is_none()) {
        return Err(StateError::InvalidArgument(format!("invalid consumed run {r:?}")));
    }
    let p = state.exactly_once.iterations.get_mut(&iteration_id).ok_or_else(|| {
        StateError::FailedPrecondition(format!(
            "iteration {iteration_id} is not exactly-once (its job was created without \
             require_exactly_once): its consumers send no consumed reports"
        ))
    })?;
    for r in runs {
        p.consumed.insert(*r);
    }
    for (u, n) in unit_ends {
        p.consumed.insert_end(*u, *n);
    }
    p.consumed.advance(p.rule);
    let g = p.client_generations.entry(client_id).or_insert(generation);
    *g = (*g).max(generation);
    p.record_generation(generation, runs, unit_ends);
    let done: BTreeSet<TaskId> = lost_tasks_done.iter().copied().collect();
    for o in &mut p.orphans {
        if done.contains(&o.task_id) {
            o.waiting.remove(&client_id);
        }
    }
    p.trim_granted();
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
