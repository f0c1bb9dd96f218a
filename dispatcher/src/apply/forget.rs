//! `ForgetIteration`: finished state is dropped, so the state (and every
//! snapshot) holds what is in use, not the whole history.
//!
//! The leader proposes it (`liveness.rs`) for an iteration that has stopped
//! handing out work (finished, or garbage-collected) and has had no consumer
//! for `finished_job_ttl`; the decision is the command, so every replica drops
//! the same things at the same log index, whatever its clock. What goes: the
//! iteration, its tasks (with their split records), its cursors, any client
//! still listed, and its job when that was the job's last iteration (a named
//! job's name is then free: the next reader by that name gets a new job). Ids
//! are never reused: the counters only grow. A reader that comes back with a
//! forgotten id gets NotFound.
//!
//! `apply` re-checks the conditions: an iteration that is live or has a
//! consumer again is kept (`changed: false`), as is a repeated proposal.
//!
//! `ForgetDataset` does the same for a dataset no job uses, after
//! `unused_dataset_ttl` (`forget_dataset`).

use super::exactly_once::progress;
use crate::command::Response;
use crate::error::StateError;
use crate::state::{DatasetId, IterationId, State};

pub(super) fn forget_iteration(
    state: &mut State,
    iteration_id: IterationId,
) -> Result<Response, StateError> {
    let Some(it) = state.iterations.get(&iteration_id) else {
        return Ok(Response::IterationForgotten { changed: false, job_forgotten: false });
    };
    if it.is_live() || !it.clients.is_empty() {
        return Ok(Response::IterationForgotten { changed: false, job_forgotten: false });
    }
    let Some(it) = state.iterations.remove(&iteration_id) else {
        return Ok(Response::IterationForgotten { changed: false, job_forgotten: false });
    };
    // Every task of the iteration: read, pending or voted out.
    let tasks: Vec<_> =
        state.tasks.values().filter(|t| t.iteration_id == iteration_id).map(|t| t.id).collect();
    for task_id in tasks {
        if let Some(task) = state.tasks.remove(&task_id) {
            if let Some(w) = state.workers.get_mut(&task.worker_address) {
                w.active_tasks_mut().remove(&task_id);
            }
        }
    }
    state.clients.retain(|_, i| *i != iteration_id);
    let clients = &state.clients;
    state.owners.clients.retain(|c, _| clients.contains_key(c));
    state.owners.iterations.remove(&iteration_id);
    let mut job_forgotten = false;
    let job_id = it.job_id;
    if let Some(job) = state.jobs.get_mut(&it.job_id) {
        job.iterations.retain(|_, i| *i != iteration_id);
        if job.iterations.is_empty() {
            let job_id = job.id;
            if let Some(job) = state.jobs.remove(&job_id) {
                if state.jobs_by_name.get(&job.name) == Some(&job_id) {
                    state.jobs_by_name.remove(&job.name);
                }
                state.owners.jobs.remove(&job_id);
                job_forgotten = true;
            }
        }
    }
    progress::iteration_forgotten(state, iteration_id, job_forgotten.then_some(job_id));
    Ok(Response::IterationForgotten { changed: true, job_forgotten })
}

/// `ForgetDataset`: drops a dataset no job uses whose use count is still
/// `uses` (the leader saw it unused for `unused_dataset_ttl` at that count; a
/// registration or a job since moved it). Its id is free again: an explicit id
/// can be registered anew, an automatic one is never handed out twice.
pub(super) fn forget_dataset(
    state: &mut State,
    dataset_id: &DatasetId,
    uses: u64,
) -> Result<Response, StateError> {
    let in_use = state.jobs.values().any(|j| &j.dataset_id == dataset_id);
    if in_use
        || !state.datasets.contains_key(dataset_id)
        || state.owners.dataset_uses(dataset_id) != uses
    {
        return Ok(Response::DatasetForgotten { changed: false });
    }
    state.datasets.remove(dataset_id);
    state.owners.datasets.remove(dataset_id);
    Ok(Response::DatasetForgotten { changed: true })
}
