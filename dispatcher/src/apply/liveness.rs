//! The pure half of liveness and garbage collection: what `Command::WorkerLost`
//! and `Command::GcIteration` do to the state. The clock half (who is late) is the
//! leader's timer in `crate::liveness`; it only proposes, and everything here holds
//! however late or often a proposal arrives:
//!
//! - `WorkerLost { address, worker_uid }` acts only on a known, not yet lost worker
//!   still registered with that uid; otherwise it changes nothing.
//! - `GcIteration { iteration_id }` acts only on a live iteration without clients.
//!
//! What a lost worker costs, and how it is counted (`docs/guarantees.md`, L-rows):
//! each of its unfinished tasks is ended and recorded in `Iteration::lost_tasks`.
//! In DYNAMIC, the **last range granted to each such task** (its `last_split`, if
//! that was a split and was granted to the uid being declared lost) is recorded in
//! `Iteration::lost_splits`: it is the range the task's pipeline was reading. This
//! is what the dispatcher knows, not an exact count of undelivered elements: part
//! of that range may have reached a reader, and elements of earlier ranges may
//! still have been in the worker's task buffer (at most `task_buffer_elements` per
//! task) or in flight to readers. A worker that restarts (registers with a new
//! uid) loses its last ranges the same way, and they are recorded the same way.
//!
//! Exactly-once iterations lose nothing: a lost task's granted units that are
//! not whole become orphans, read again once every consumer acknowledged
//! (`exactly_once/orphans.rs`); a restarted worker's tasks of such an iteration
//! end as lost too (the new process gets fresh ones), for the same reason.

use super::exactly_once::orphans;
use crate::command::Response;
use crate::error::StateError;
use crate::state::{IterationId, LostSplit, SplitAnswer, State, TaskId};

pub(super) fn worker_lost(
    state: &mut State,
    address: &str,
    worker_uid: u64,
) -> Result<Response, StateError> {
    let Some(worker) = state.workers.get_mut(address) else {
        return Ok(Response::WorkerLost { changed: false });
    };
    if worker.lost || worker.worker_uid != worker_uid {
        return Ok(Response::WorkerLost { changed: false });
    }
    worker.lost = true;
    let tasks: Vec<TaskId> = std::mem::take(&mut worker.active_tasks).iter().copied().collect();
    let mut touched: std::collections::BTreeSet<IterationId> =
        orphans::orphan_finished_tasks(state, address).into_iter().collect();
    for task_id in tasks {
        let Some(task) = state.tasks.get_mut(&task_id) else { continue };
        if task.finished {
            continue;
        }
        task.finished = true;
        task.lost = true;
        // A split range is recorded as lost and taken; any other last answer is
        // kept: it tells readers whether the task ever held an element
        // (`State::lost_task_held_elements`).
        let lost_range = match task.last_split {
            Some(r) if r.worker_uid == worker_uid => match r.answer {
                SplitAnswer::Split { begin, end } => {
                    task.last_split = None;
                    Some(LostSplit { task_id, begin, end })
                }
                SplitAnswer::EndOfSplits | SplitAnswer::Wait => None,
            },
            _ => None,
        };
        let iteration_id = task.iteration_id;
        if let Some(it) = state.iterations.get_mut(&iteration_id) {
            it.lost_tasks.insert(task_id);
            it.lost_splits.extend(lost_range);
        }
        orphans::orphan_task(state, iteration_id, task_id);
        touched.insert(iteration_id);
    }
    for iteration_id in touched {
        orphans::ensure_reader(state, iteration_id, u64::MAX);
        finish_if_complete(state, iteration_id);
    }
    Ok(Response::WorkerLost { changed: true })
}

/// A worker registering with a uid other than the one on record is a new process:
/// the split ranges its predecessor held are lost (D5). Records them like a lost
/// worker's, and clears them so they are counted once. Call before the uid changes.
pub(super) fn record_restart_loss(state: &mut State, address: &str, new_uid: u64) {
    let Some(worker) = state.workers.get(address) else { return };
    let old_uid = worker.worker_uid;
    if old_uid == new_uid || worker.lost {
        return;
    }
    let tasks: Vec<TaskId> = worker.active_tasks.iter().copied().collect();
    // Exactly-once: what its ended tasks still held is gone with the process.
    orphans::orphan_finished_tasks(state, address);
    for task_id in tasks {
        let Some(task) = state.tasks.get_mut(&task_id) else { continue };
        let iteration_id = task.iteration_id;
        let last = task.last_split.filter(|r| r.worker_uid == old_uid);
        if last.is_some() {
            // Requests carrying the new uid never matched the old record anyway.
            task.last_split = None;
        }
        if let Some(SplitAnswer::Split { begin, end }) = last.map(|r| r.answer) {
            if let Some(it) = state.iterations.get_mut(&iteration_id) {
                it.lost_splits.push(LostSplit { task_id, begin, end });
            }
        }
        // Exactly-once: the task ends as lost, its units become orphans, and the
        // new process gets a fresh task (`workers.rs`).
        orphans::end_restarted_task(state, task_id);
    }
}

pub(super) fn gc_iteration(
    state: &mut State,
    iteration_id: IterationId,
) -> Result<Response, StateError> {
    let Some(it) = state.iterations.get_mut(&iteration_id) else {
        return Err(StateError::not_found("iteration", iteration_id));
    };
    if !it.is_live() || !it.clients.is_empty() {
        return Ok(Response::IterationCollected { changed: false });
    }
    end_iteration(state, iteration_id);
    Ok(Response::IterationCollected { changed: true })
}

/// Collects an iteration (also one replaced by a restore): nobody joins it
/// again, and its unfinished tasks end, so their workers are told to delete them.
pub(super) fn end_iteration(state: &mut State, iteration_id: IterationId) {
    let Some(it) = state.iterations.get_mut(&iteration_id) else { return };
    it.garbage_collected = true;
    let tasks = it.tasks.clone();
    for task_id in tasks {
        let Some(task) = state.tasks.get_mut(&task_id) else { continue };
        if task.finished {
            continue;
        }
        // Ended, so the worker's next heartbeat answer lists it in tasks_to_delete.
        task.finished = true;
        let address = task.worker_address.clone();
        if let Some(w) = state.workers.get_mut(&address) {
            w.active_tasks_mut().remove(&task_id);
        }
    }
}

fn finish_if_complete(state: &mut State, iteration_id: IterationId) {
    let complete = state
        .iterations
        .get(&iteration_id)
        .is_some_and(|it| it.is_live() && state.iteration_complete(it));
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        if complete {
            it.finished = true;
        }
    }
}
