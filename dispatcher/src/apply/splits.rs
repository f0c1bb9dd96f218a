//! Dynamic sharding: `GetSplit` hands out the next range of a DYNAMIC iteration's
//! source, idempotently per (task, worker uid, sequence), so a retried request
//! whose answer was lost gets the same range again and never a second one. Only
//! the process the task's worker is currently registered as (its `worker_uid`)
//! is answered: a stale incarnation or another identity is refused. An
//! exactly-once iteration's grants (orphans first, skip runs, `Wait`) are
//! `exactly_once/grants.rs`'s.

use super::exactly_once::{grants, ordered};
use crate::command::Response;
use crate::error::StateError;
use crate::state::{SplitAnswer, SplitCursor, SplitRecord, State, TaskId};

pub use sluice_proto::contract::MAX_SPLITS_PER_GRANT;

pub(super) fn get_split(
    state: &mut State,
    task_id: TaskId,
    worker_uid: u64,
    sequence: u64,
    provider: u32,
    repetition: u64,
    max_splits: u32,
) -> Result<Response, StateError> {
    // The cursor moves to `repetition + 1` when an epoch closes: the counter a
    // worker sends must leave room for that.
    if repetition == u64::MAX {
        return Err(StateError::InvalidArgument(format!(
            "task {task_id}: split request for repetition {repetition}, which is out of range"
        )));
    }
    let task = state.tasks.get(&task_id).ok_or_else(|| StateError::not_found("task", task_id))?;
    // Only the process the task's worker is registered as takes its splits.
    state.registered_worker(&task.worker_address, worker_uid).map_err(|e| match e {
        StateError::FailedPrecondition(m) => {
            StateError::FailedPrecondition(format!("task {task_id}: {m}"))
        }
        e => e,
    })?;
    // A task ended by liveness or GC takes nothing more, not even a replay of a
    // range already counted as lost: its worker is told to delete it.
    let collected = state.iterations.get(&task.iteration_id).is_some_and(|i| i.garbage_collected);
    if task.lost || (collected && task.finished) {
        return Ok(Response::Split(SplitAnswer::EndOfSplits));
    }
    if let Some(last) = task.last_split.filter(|l| l.worker_uid == worker_uid) {
        // A `Wait` granted nothing: asking again with its sequence is a new
        // question (so is asking with the next one).
        let waited = last.answer == SplitAnswer::Wait;
        if sequence == last.sequence && !waited {
            // A retry whose answer was lost: the same split again, never a second one.
            return Ok(match ordered::Shape::of(state, task.iteration_id) {
                Some(shape) => ordered::replay(state, task_id, last, shape),
                None => grants::replay(state, task_id, last),
            });
        }
        if sequence != last.sequence && last.sequence.checked_add(1) != Some(sequence) {
            return Err(StateError::FailedPrecondition(format!(
                "task {task_id}: split request sequence {sequence} out of order (last answered \
                 {}); sequences go up by one per answer",
                last.sequence
            )));
        }
    }
    let iteration = state
        .iterations
        .get(&task.iteration_id)
        .ok_or_else(|| StateError::not_found("iteration", task.iteration_id))?;
    let cursor = iteration.cursors.get(provider as usize).copied().ok_or_else(|| {
        StateError::FailedPrecondition(format!(
            "task {task_id}: iteration {} has {} split providers, asked for provider {provider} \
             (splits exist only in DYNAMIC mode)",
            iteration.id,
            iteration.cursors.len()
        ))
    })?;
    let job = state.jobs.get(&iteration.job_id);
    let cardinality = job
        .and_then(|j| state.datasets.get(&j.dataset_id))
        .and_then(|d| d.source_cardinality)
        .unwrap_or(0);
    // A grant of k splits is the range of k consecutive splits.
    let step = iteration
        .elements_per_split
        .saturating_mul(u64::from(max_splits.clamp(1, MAX_SPLITS_PER_GRANT)));
    let iteration_id = iteration.id;
    if provider == 0 && grants::is_exactly_once(state, iteration_id) {
        // The cursor never hands out a unit below the consumed watermark: it is
        // whole (e.g. a restored position's units, once the records the cursor
        // had not reached yet were reported), and a range below the watermark
        // would be granted without skips.
        let from =
            SplitCursor { next: cursor.next.max(grants::watermark(state, iteration_id)), ..cursor };
        let ask = grants::Ask {
            task_id,
            iteration_id,
            worker_uid,
            sequence,
            repetition,
            cursor,
            fresh: next_split(from, repetition, cardinality, step),
            step,
        };
        grants::check_repetition(&ask)?;
        return Ok(match ordered::Shape::of(state, iteration_id) {
            Some(shape) => ordered::grant(state, ask, shape),
            None => grants::grant(state, ask),
        });
    }

    let (answer, new_cursor) = next_split(cursor, repetition, cardinality, step);
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        it.cursors[provider as usize] = new_cursor;
    }
    if let Some(task) = state.tasks.get_mut(&task_id) {
        task.last_split = Some(SplitRecord { worker_uid, sequence, answer });
    }
    Ok(Response::Split(answer))
}

/// The cursor arithmetic of dynamic sharding, as in tf.data: a request for an
/// epoch already closed gets end-of-splits; a request for a later epoch abandons
/// the current one; the first request past the end closes the epoch for everyone.
pub fn next_split(
    cursor: SplitCursor,
    repetition: u64,
    cardinality: u64,
    step: u64,
) -> (SplitAnswer, SplitCursor) {
    if repetition < cursor.repetition {
        return (SplitAnswer::EndOfSplits, cursor);
    }
    let cursor =
        if repetition > cursor.repetition { SplitCursor { repetition, next: 0 } } else { cursor };
    if cursor.next >= cardinality {
        let closed = SplitCursor { repetition: cursor.repetition.saturating_add(1), next: 0 };
        return (SplitAnswer::EndOfSplits, closed);
    }
    let end = cursor.next.saturating_add(step).min(cardinality);
    (SplitAnswer::Split { begin: cursor.next, end }, SplitCursor { next: end, ..cursor })
}
