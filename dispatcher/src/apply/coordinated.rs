//! Coordinated (round-robin) reads: the replicated half, as pure functions called
//! by `apply`. The leader's soft half (pauses and votes) is in
//! `crate::coordinated_reads`; the protocol as a whole is described there.
//!
//! What is replicated: the job's `num_consumers`, each iteration's pending tasks
//! (workers that joined after it started, not yet read by consumers), each task's
//! `starting_round`, and the tasks voted out. Promotion and removal are commands,
//! so every replica, and a new leader, agrees on which round a task joined or
//! left.

use sluice_dataset::Cardinality;

use super::jobs::{self, NewJob};
use crate::command::Response;
use crate::error::StateError;
use crate::quotas::Admission;
use crate::state::*;

/// A plain `GetOrCreateJob` may not join a job that reads in rounds: the reader
/// would not take part in the rounds and the others would wait for it forever.
pub(super) fn refuse_plain_join(state: &State, job_name: Option<&str>) -> Result<(), StateError> {
    let job = job_name.and_then(|n| state.jobs_by_name.get(n)).and_then(|id| state.jobs.get(id));
    match job.and_then(|j| j.num_consumers) {
        Some(n) => Err(StateError::InvalidArgument(format!(
            "job `{}` already exists with num_consumers={n}, but this request asked for \
             num_consumers=None; set num_consumers and consumer_index to join it, or use \
             another job name",
            job.map(|j| j.name.as_str()).unwrap_or_default()
        ))),
        None => Ok(()),
    }
}

pub(super) fn get_or_create_job(
    state: &mut State,
    job: NewJob,
    static_workers: Vec<String>,
    num_consumers: u32,
    admit: &Admission,
) -> Result<Response, StateError> {
    let NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache } = job;
    if cross_trainer_cache {
        return Err(StateError::InvalidArgument(
            "a job cannot have both coordinated reads (num_consumers) and the cross-trainer \
             cache: consumers of a round read the same elements once, trainers of a cache \
             each read all of them; choose one"
                .into(),
        ));
    }
    let Some(name) = job_name.as_deref() else {
        return Err(StateError::InvalidArgument(
            "num_consumers needs a job name: the consumers of a coordinated read find each \
             other by it"
                .into(),
        ));
    };
    if num_consumers == 0 {
        return Err(StateError::InvalidArgument("num_consumers must be at least 1".into()));
    }
    if num_consumers > admit.limits.max_num_consumers {
        return Err(StateError::ResourceExhausted(format!(
            "num_consumers={num_consumers} is over this dispatcher's cap \
             (--max-num-consumers {}); use fewer consumers, or raise the cap on every \
             dispatcher",
            admit.limits.max_num_consumers
        )));
    }
    if target_workers == TargetWorkers::Local {
        return Err(StateError::InvalidArgument(
            "num_consumers cannot be used with target_workers=LOCAL: every consumer of a \
             round must read the same workers"
                .into(),
        ));
    }
    if let Some(job) = state.jobs_by_name.get(name).and_then(|id| state.jobs.get(id)) {
        if job.num_consumers != Some(num_consumers) {
            let theirs = job.num_consumers.map_or("None".to_string(), |n| n.to_string());
            return Err(StateError::InvalidArgument(format!(
                "job `{name}` already exists with num_consumers={theirs}, but this request \
                 asked for num_consumers={num_consumers}; use the same num_consumers to join \
                 it, or another job name"
            )));
        }
        let job = NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache: false };
        return jobs::get_or_create_job(state, job, static_workers, admit);
    }
    if let Some(dataset) = state.datasets.get(&dataset_id) {
        let ends = match dataset.def.cardinality() {
            Cardinality::Finite(n) => Some(n),
            Cardinality::Infinite | Cardinality::Unknown => None,
        };
        if let Some(n) = ends {
            return Err(StateError::InvalidArgument(format!(
                "coordinated reads (num_consumers={num_consumers}) need an infinite dataset \
                 (end it with repeat()); dataset `{dataset_id}` ends after {n} element(s)"
            )));
        }
    }
    let job = NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache: false };
    let created = jobs::get_or_create_job(state, job, static_workers, admit)?;
    if let Response::Job { job_id, .. } = &created {
        if let Some(job) = state.jobs.get_mut(job_id) {
            job.num_consumers = Some(num_consumers);
        }
    }
    Ok(created)
}

/// Adds a new task to its iteration: at the end of the read order, or, for a
/// coordinated iteration, to the pending tasks that join at an agreed round.
pub(super) fn add_task(state: &mut State, iteration_id: IterationId, task_id: TaskId) {
    let Some(it) = state.iterations.get_mut(&iteration_id) else { return };
    match &mut it.coordinated {
        Some(rr) => rr.pending.push(task_id),
        None => it.tasks.push(task_id),
    }
}

pub(super) fn promote_tasks(
    state: &mut State,
    iteration_id: IterationId,
    starting_round: u64,
) -> Result<Response, StateError> {
    let it = state
        .iterations
        .get_mut(&iteration_id)
        .ok_or_else(|| StateError::not_found("iteration", iteration_id))?;
    let Some(rr) = &mut it.coordinated else {
        return Err(StateError::FailedPrecondition(format!(
            "iteration {iteration_id} does not read in rounds (its job has no num_consumers)"
        )));
    };
    let task_ids = std::mem::take(&mut rr.pending);
    it.tasks.extend(task_ids.iter().copied());
    for id in &task_ids {
        if let Some(task) = state.tasks.get_mut(id) {
            task.starting_round = starting_round;
        }
    }
    Ok(Response::CoordinatedPromoted { task_ids })
}

pub(super) fn remove_task(
    state: &mut State,
    task_id: TaskId,
    round: u64,
) -> Result<Response, StateError> {
    let task = state.tasks.get(&task_id).ok_or_else(|| StateError::not_found("task", task_id))?;
    let worker_address = task.worker_address.clone();
    let it = state
        .iterations
        .get_mut(&task.iteration_id)
        .ok_or_else(|| StateError::not_found("iteration", task.iteration_id))?;
    let Some(rr) = &mut it.coordinated else {
        return Err(StateError::FailedPrecondition(format!(
            "task {task_id} is not read in rounds; only coordinated tasks can be voted out"
        )));
    };
    rr.removed.entry(task_id).or_insert(round);
    // Not pending any more either: it never joins.
    rr.pending.retain(|t| *t != task_id);
    // The worker is told to drop it; if it comes back it gets a fresh (pending) task.
    if let Some(w) = state.workers.get_mut(&worker_address) {
        w.active_tasks_mut().remove(&task_id);
    }
    Ok(Response::CoordinatedRemoved)
}
