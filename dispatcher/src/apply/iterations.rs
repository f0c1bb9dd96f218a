//! Iterations, their tasks and their consumers: `GetOrCreateIteration` (the
//! iteration, one task per taking-part worker that is not lost — for a pipeline
//! with Python stages, per worker that can run them — and a client id, in one
//! command),
//! `ReleaseClient`, and `FinishTasks` (tasks that reached end of sequence, and the
//! iterations that thereby finished).
//!
//! This module owns task creation: [`new_task`] is also what `workers.rs` calls
//! when a worker joins running iterations.

use std::collections::BTreeSet;

use super::exactly_once::progress;
use crate::command::Response;
use crate::error::StateError;
use crate::limits::Limits;
use crate::owners::Owners;
use crate::quotas::{Admission, Held};
use crate::state::{
    ClientId, CoordinatedIteration, Iteration, IterationId, JobId, Mode, SplitCursor, State, Task,
    TaskId,
};

pub(super) fn get_or_create_iteration(
    state: &mut State,
    job_id: JobId,
    repetition: u64,
    elements_per_split: u64,
    admit: &Admission,
) -> Result<Response, StateError> {
    let job = state.jobs.get(&job_id).ok_or_else(|| {
        StateError::not_found_hint(
            "job",
            job_id,
            "; a job whose iterations all finished is collected after the finished-job TTL \
             (--finished-job-ttl-secs): get or create the job again",
        )
    })?;
    if elements_per_split == 0 {
        return Err(StateError::InvalidArgument("elements_per_split must be > 0".into()));
    }
    // A garbage-collected iteration is never rejoined: the key gets a new one
    // (tf.data), whose data starts over.
    let existing = job
        .iterations
        .get(&repetition)
        .filter(|id| state.iterations.get(id).is_some_and(|it| !it.garbage_collected));
    Limits::check(
        state.clients.len(),
        admit.limits.max_clients,
        "consumers (clients)",
        "--max-clients",
    )?;
    admit.check(state, Held::Clients)?;
    let iteration_id = match existing {
        Some(id) => *id,
        None => {
            Limits::check(
                state.iterations.len(),
                admit.limits.max_iterations,
                "iterations",
                "--max-iterations",
            )?;
            admit.check(state, Held::Iterations)?;
            admit.check(state, Held::LiveIterations)?;
            let cursors = match job.mode {
                Mode::Dynamic => vec![SplitCursor::default()],
                _ => vec![],
            };
            // Only workers that are registered and not lost: a task on a lost
            // worker would never end (nothing declares a worker lost twice), and
            // every reader of the iteration would wait on it. Static modes: only
            // the listed workers; the others, and a lost one that comes back, get
            // their shard's task when they register (`workers.rs`).
            let live = |a: &String| state.workers.get(a).is_some_and(|w| !w.lost);
            let workers: Vec<String> = if job.is_static() {
                job.static_workers.iter().filter(|a| live(a)).cloned().collect()
            } else {
                // A pipeline with Python stages only on workers whose Python can run it.
                let needs = state.python_needs(job);
                state
                    .workers
                    .values()
                    .filter(|w| !w.lost && w.can_run(&needs))
                    .map(|w| w.address.clone())
                    .collect()
            };
            // Every worker gets a task: one at its cap refuses the iteration.
            for address in &workers {
                let held = state.workers.get(address).map_or(0, |w| w.active_tasks.len());
                if held as u64 >= admit.limits.max_tasks_per_worker {
                    return Err(StateError::ResourceExhausted(format!(
                        "worker {address} runs {held} unfinished tasks, its cap \
                         (--max-tasks-per-worker {}); wait for iterations to finish or be \
                         collected, add workers, or raise the cap on every dispatcher",
                        admit.limits.max_tasks_per_worker
                    )));
                }
            }
            let iteration_id = state.next_iteration_id;
            state.next_iteration_id += 1;
            let coordinated = job
                .num_consumers
                .map(|num_consumers| CoordinatedIteration { num_consumers, ..Default::default() });
            let mut iteration = Iteration {
                id: iteration_id,
                job_id,
                repetition,
                tasks: vec![],
                clients: BTreeSet::new(),
                cursors,
                elements_per_split,
                finished: false,
                lost_splits: vec![],
                lost_tasks: BTreeSet::new(),
                garbage_collected: false,
                coordinated,
            };
            for address in workers {
                let task_id = new_task(state, job_id, iteration_id, &address);
                iteration.tasks.push(task_id);
            }
            state.iterations.insert(iteration_id, iteration);
            Owners::record(&mut state.owners.iterations, iteration_id, admit.owner());
            if let Some(job) = state.jobs.get_mut(&job_id) {
                job.iterations.insert(repetition, iteration_id);
            }
            progress::iteration_created(state, iteration_id);
            iteration_id
        }
    };
    let client_id = state.next_client_id;
    state.next_client_id += 1;
    state.clients.insert(client_id, iteration_id);
    Owners::record(&mut state.owners.clients, client_id, admit.owner());
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        it.clients.insert(client_id);
    }
    progress::client_joined(state, iteration_id, client_id, 0);
    Ok(Response::Iteration { iteration_id, client_id })
}

/// Creates a task and assigns it to the worker; the caller adds it to the iteration.
/// For a static job the task reads the worker's shard: its position in the job's
/// `static_workers`.
pub(super) fn new_task(
    state: &mut State,
    job_id: JobId,
    iteration_id: IterationId,
    address: &str,
) -> TaskId {
    let task_id = state.next_task_id;
    state.next_task_id += 1;
    let worker_index = state.jobs.get(&job_id).and_then(|j| j.shard_of(address)).unwrap_or(0);
    state.tasks.insert(
        task_id,
        Task {
            id: task_id,
            iteration_id,
            worker_address: address.to_string(),
            worker_index,
            finished: false,
            last_split: None,
            lost: false,
            starting_round: 0,
        },
    );
    if let Some(w) = state.workers.get_mut(address) {
        w.active_tasks_mut().insert(task_id);
    }
    task_id
}

pub(super) fn release_client(
    state: &mut State,
    client_id: ClientId,
) -> Result<Response, StateError> {
    let iteration_id = state.clients.remove(&client_id).ok_or_else(|| {
        StateError::not_found_hint(
            "iteration client",
            client_id.to_string(),
            "; it was already released",
        )
    })?;
    state.owners.clients.remove(&client_id);
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        it.clients.remove(&client_id);
    }
    progress::client_left(state, iteration_id, client_id);
    Ok(Response::ClientReleased)
}

pub(super) fn finish_tasks(
    state: &mut State,
    worker_address: &str,
    worker_uid: u64,
    task_ids: &[TaskId],
) -> Result<Response, StateError> {
    // Only the registered process reports its tasks.
    state.registered_worker(worker_address, worker_uid)?;
    let mut touched = BTreeSet::new();
    for id in task_ids {
        let Some(task) = state.tasks.get_mut(id) else { continue };
        if task.worker_address != worker_address || task.finished {
            continue;
        }
        task.finished = true;
        touched.insert(task.iteration_id);
        if let Some(w) = state.workers.get_mut(worker_address) {
            w.active_tasks_mut().remove(id);
        }
    }
    let mut finished_iterations = vec![];
    for iteration_id in touched {
        let all_done =
            state.iterations.get(&iteration_id).is_some_and(|it| state.iteration_complete(it));
        if let Some(it) = state.iterations.get_mut(&iteration_id) {
            if all_done && !it.finished {
                it.finished = true;
                finished_iterations.push(iteration_id);
            }
        }
    }
    Ok(Response::TasksFinished { finished_iterations })
}
