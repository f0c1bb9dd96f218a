//! `RestoreIteration`: readers restoring a job from a position (one consumer's,
//! or the merge of one checkpoint's).
//!
//! Readers restoring from equal positions (the same `restore_key`) join one
//! restored iteration. Any other position replaces the job's iteration for the
//! repetition: the current one is ended like a collected one (its tasks are
//! told to go, nobody joins it again) and a new one starts whose consumed
//! records are the position's: its cursor starts at the position's watermark,
//! and units above it are handed out with their consumed records as
//! `skip_runs` (`grants.rs`), so every record not in the position is delivered
//! once. The restoring consumers continue counting positions from the
//! position's generation.

use super::super::{iterations, liveness};
use super::progress;
use crate::command::{Response, RestorePoint};
use crate::error::StateError;
use crate::exactly_once::Progress;
use crate::quotas::Admission;
use crate::state::{IterationId, JobId, State};

pub(crate) fn restore(
    state: &mut State,
    job_id: JobId,
    repetition: u64,
    elements_per_split: u64,
    point: RestorePoint,
    admit: &Admission,
) -> Result<Response, StateError> {
    let job = state.jobs.get(&job_id).ok_or_else(|| {
        StateError::not_found_hint("job", job_id, "; get or create the job again, then restore")
    })?;
    let Some(rule) = state.exactly_once.jobs.get(&job_id).copied() else {
        return Err(StateError::FailedPrecondition(format!(
            "job `{}` has at-most-once delivery, and only an exactly-once job can be restored \
             from a position; create the job with require_exactly_once (under another name)",
            job.name
        )));
    };
    let mismatch = |what: &str, theirs: &str, ours: &str| {
        StateError::InvalidArgument(format!(
            "the position is of {what} {theirs}, and this request reads {what} {ours}; restore \
             a position into the job, dataset and repetition it was taken from"
        ))
    };
    if point.job_name != job.name {
        return Err(mismatch("job", &format!("`{}`", point.job_name), &format!("`{}`", job.name)));
    }
    if point.dataset_id != job.dataset_id {
        let (a, b) = (format!("`{}`", point.dataset_id), format!("`{}`", job.dataset_id));
        return Err(mismatch("dataset", &a, &b));
    }
    if point.repetition != repetition {
        let (a, b) = (point.repetition.to_string(), repetition.to_string());
        return Err(mismatch("repetition", &a, &b));
    }
    if let Some(n) = state.source_cardinality_of(job_id) {
        let c = &point.consumed;
        let top = c.runs().map(|r| r.unit + 1).chain(c.ends().map(|e| e.0 + 1)).max();
        let top = top.unwrap_or(0).max(c.watermark());
        if top > n {
            return Err(StateError::InvalidArgument(format!(
                "the position counts {top} units, and dataset `{}` has {n}: it was not taken \
                 from this dataset's reads",
                point.dataset_id
            )));
        }
    }
    let current: Option<IterationId> = job
        .iterations
        .get(&repetition)
        .copied()
        .filter(|id| state.iterations.get(id).is_some_and(|it| !it.garbage_collected));
    let same = current.filter(|id| {
        state.exactly_once.iterations.get(id).is_some_and(|p| p.restore_key == Some(point.key))
    });
    if let Some(id) = same {
        let joined = iterations::get_or_create_iteration(
            state,
            job_id,
            repetition,
            elements_per_split,
            admit,
        )?;
        if let Response::Iteration { client_id, .. } = joined {
            progress::client_joined(state, id, client_id, point.generation);
        }
        return Ok(joined);
    }
    // Replacing: a refusal (a cap) must leave the state as it was.
    let before = state.clone();
    if let Some(id) = current {
        liveness::end_iteration(state, id);
        if let Some(p) = state.exactly_once.iterations.get_mut(&id) {
            p.orphans.clear();
        }
    }
    let created =
        iterations::get_or_create_iteration(state, job_id, repetition, elements_per_split, admit);
    let Ok(Response::Iteration { iteration_id, client_id }) = created else {
        *state = before;
        return created;
    };
    let mut p = Progress::new(rule, point.consumed);
    p.restore_key = Some(point.key);
    let mut start = p.consumed.watermark();
    state.exactly_once.iterations.insert(iteration_id, p);
    // A deterministic-order cursor counts places: it starts at the floor.
    if let Some(shape) = super::ordered::Shape::of(state, iteration_id) {
        start = crate::order::floor(start, shape.units_per_split);
    }
    if let Some(c) = state.iterations.get_mut(&iteration_id).and_then(|it| it.cursors.first_mut()) {
        c.next = start;
    }
    progress::client_joined(state, iteration_id, client_id, point.generation);
    Ok(Response::Iteration { iteration_id, client_id })
}
