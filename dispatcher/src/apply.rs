//! The pure state machine: `apply(&mut State, Command) -> Result<Response, StateError>`.
//!
//! No I/O, clock or randomness: the same commands applied to the same state give
//! the same state and answers on every replica and on replay. A refused command
//! leaves the state unchanged (all checks happen before the first mutation).

use std::collections::BTreeSet;

use sluice_dataset::DatasetDef;

use crate::command::{Command, Response};
use crate::coordinated;
use crate::error::StateError;
use crate::state::*;

/// The most splits one GetSplit may take at once.
pub const MAX_SPLITS_PER_GRANT: u32 = 1024;

pub fn apply(state: &mut State, cmd: Command) -> Result<Response, StateError> {
    match cmd {
        Command::RegisterDataset { dataset_id, def } => register_dataset(state, dataset_id, def),
        Command::GetOrCreateJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
        } => {
            let job = NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache };
            match num_consumers {
                Some(n) => coordinated::get_or_create_job(state, job, static_workers, n),
                None => {
                    coordinated::refuse_plain_join(state, job.job_name.as_deref())?;
                    get_or_create_job(state, job, static_workers)
                }
            }
        }
        Command::GetOrCreateIteration { job_id, repetition, elements_per_split } => {
            get_or_create_iteration(state, job_id, repetition, elements_per_split)
        }
        Command::ReleaseClient { client_id } => release_client(state, client_id),
        Command::RegisterWorker { address, worker_uid, functions } => {
            register_worker(state, address, worker_uid, functions)
        }
        Command::FinishTasks { worker_address, task_ids } => {
            finish_tasks(state, &worker_address, &task_ids)
        }
        Command::GetSplit { task_id, worker_uid, sequence, provider, repetition, max_splits } => {
            get_split(state, task_id, worker_uid, sequence, provider, repetition, max_splits)
        }
        Command::Batch(cmds) => Ok(Response::Batch(
            cmds.into_iter()
                .map(|c| match c {
                    Command::Batch(_) => {
                        Err(StateError::InvalidArgument("batches do not nest".into()))
                    }
                    c => apply(state, c),
                })
                .collect(),
        )),
        Command::WorkerLost { address, worker_uid } => {
            crate::apply_liveness::worker_lost(state, &address, worker_uid)
        }
        Command::GcIteration { iteration_id } => {
            crate::apply_liveness::gc_iteration(state, iteration_id)
        }
        Command::CoordinatedPromoteTasks { iteration_id, starting_round } => {
            coordinated::promote_tasks(state, iteration_id, starting_round)
        }
        Command::CoordinatedRemoveTask { task_id, round } => {
            coordinated::remove_task(state, task_id, round)
        }
    }
}

fn register_dataset(
    state: &mut State,
    dataset_id: Option<DatasetId>,
    def: DatasetDef,
) -> Result<Response, StateError> {
    if let Some(id) = &dataset_id {
        if id.is_empty() {
            return Err(StateError::InvalidArgument("dataset id must not be empty".into()));
        }
        if let Some(existing) = state.datasets.get(id) {
            if existing.def == def {
                return Ok(Response::DatasetRegistered { dataset_id: id.clone() });
            }
            return Err(StateError::AlreadyExists(format!(
                "dataset `{id}` is already registered with a different definition; register \
                 this one under another id, or without an id to get a new one"
            )));
        }
    }
    let id = match dataset_id {
        Some(id) => id,
        None => {
            while state.datasets.contains_key(&state.next_dataset_id.to_string()) {
                state.next_dataset_id += 1;
            }
            state.next_dataset_id.to_string()
        }
    };
    // Keep automatic ids clear of numeric ids users chose.
    if let Ok(n) = id.parse::<u64>() {
        state.next_dataset_id = state.next_dataset_id.max(n.saturating_add(1));
    }
    let source_cardinality = def.source_cardinality();
    state.datasets.insert(id.clone(), Dataset { id: id.clone(), def, source_cardinality });
    Ok(Response::DatasetRegistered { dataset_id: id })
}

/// What a `GetOrCreateJob` asks for: the job's identity.
pub(crate) struct NewJob {
    pub dataset_id: DatasetId,
    pub mode: Mode,
    pub job_name: Option<String>,
    pub target_workers: TargetWorkers,
    pub cross_trainer_cache: bool,
}

pub(crate) fn get_or_create_job(
    state: &mut State,
    job: NewJob,
    static_workers: Vec<String>,
) -> Result<Response, StateError> {
    let NewJob { dataset_id, mode, job_name, target_workers, cross_trainer_cache } = job;
    let Some(dataset) = state.datasets.get(&dataset_id) else {
        return Err(StateError::not_found_hint(
            "dataset",
            dataset_id,
            "; register it first (sluice register, or Client::register_dataset)",
        ));
    };
    if let Some(name) = &job_name {
        if name.is_empty() {
            return Err(StateError::InvalidArgument("job name must not be empty".into()));
        }
        if let Some(job) = state.jobs_by_name.get(name).and_then(|id| state.jobs.get(id)) {
            if job.cross_trainer_cache != cross_trainer_cache {
                return Err(crate::cache_check::identity_conflict(
                    name,
                    job.cross_trainer_cache,
                    cross_trainer_cache,
                ));
            }
            if job.dataset_id != dataset_id
                || job.mode != mode
                || job.target_workers != target_workers
            {
                return Err(StateError::InvalidArgument(format!(
                    "job `{name}` already exists with dataset_id={} mode={} target_workers={}, \
                     but this request asked for dataset_id={dataset_id} mode={} \
                     target_workers={}; use the same parameters to join it, or another job name",
                    job.dataset_id,
                    job.mode.name(),
                    job.target_workers.name(),
                    mode.name(),
                    target_workers.name()
                )));
            }
            return Ok(Response::Job { job_id: job.id, job_name: name.clone() });
        }
    }
    check_sharding(&dataset.def, &dataset_id, mode, &static_workers)?;
    if cross_trainer_cache {
        crate::cache_check::check(&dataset.def, &dataset_id, job_name.as_deref())?;
    }
    // Only static jobs keep the worker list: it decides their shards.
    let static_workers = if mode.static_policy().is_some() { static_workers } else { vec![] };
    let job_id = state.next_job_id;
    state.next_job_id += 1;
    let (name, anonymous) = match job_name {
        Some(n) => (n, false),
        None => (format!("anonymous-{job_id}"), true),
    };
    if !anonymous {
        state.jobs_by_name.insert(name.clone(), job_id);
    }
    state.jobs.insert(
        job_id,
        Job {
            id: job_id,
            name: name.clone(),
            anonymous,
            dataset_id,
            mode,
            target_workers,
            static_workers,
            iterations: Default::default(),
            cross_trainer_cache,
            num_consumers: None,
        },
    );
    Ok(Response::Job { job_id, job_name: name })
}

/// Whether `mode` can divide `def` (among `static_workers` for a static mode). The
/// mode is a job property, so this runs when a job is created, not at registration.
fn check_sharding(
    def: &DatasetDef,
    dataset_id: &str,
    mode: Mode,
    static_workers: &[String],
) -> Result<(), StateError> {
    let refused = |e: sluice_dataset::DatasetError| {
        let msg = format!("cannot create a {} job over dataset `{dataset_id}`: {e}", mode.name());
        // A condition of the server or of the mode choice (no worker list, a
        // placeholder meant for HINT) is FailedPrecondition; a pipeline the policy
        // cannot divide is InvalidArgument.
        let misplaced_hint = mode != Mode::Hint && def.has_shard_hint();
        let no_list = mode.static_policy().is_some() && static_workers.is_empty();
        if misplaced_hint || no_list {
            StateError::FailedPrecondition(msg)
        } else {
            StateError::InvalidArgument(msg)
        }
    };
    match mode.static_policy() {
        Some(policy) => def.check_static(policy, static_workers.len()).map_err(refused),
        None if mode == Mode::Dynamic => def.check_dynamic().map_err(refused),
        None if def.has_shard_hint() => Err(refused(sluice_dataset::DatasetError::InvalidSpec {
            field: "stages".into(),
            message: "shard(SHARD_HINT) is a placeholder that only the HINT processing mode \
                      replaces, and this job's mode is OFF; use HINT, or give shard numbers"
                .into(),
        })),
        None => Ok(()),
    }
}

fn get_or_create_iteration(
    state: &mut State,
    job_id: JobId,
    repetition: u64,
    elements_per_split: u64,
) -> Result<Response, StateError> {
    let job = state.jobs.get(&job_id).ok_or_else(|| StateError::not_found("job", job_id))?;
    if elements_per_split == 0 {
        return Err(StateError::InvalidArgument("elements_per_split must be > 0".into()));
    }
    // A garbage-collected iteration is never rejoined: the key gets a new one
    // (tf.data), whose data starts over.
    let existing = job
        .iterations
        .get(&repetition)
        .filter(|id| state.iterations.get(id).is_some_and(|it| !it.garbage_collected));
    let iteration_id = match existing {
        Some(id) => *id,
        None => {
            let iteration_id = state.next_iteration_id;
            state.next_iteration_id += 1;
            let cursors = match job.mode {
                Mode::Dynamic => vec![SplitCursor::default()],
                _ => vec![],
            };
            // Static modes: only the listed workers that registered so far; the
            // others get their shard's task when they register.
            let workers: Vec<String> = if job.mode.static_policy().is_some() {
                job.static_workers
                    .iter()
                    .filter(|a| state.workers.contains_key(*a))
                    .cloned()
                    .collect()
            } else {
                state.workers.keys().cloned().collect()
            };
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
            if let Some(job) = state.jobs.get_mut(&job_id) {
                job.iterations.insert(repetition, iteration_id);
            }
            iteration_id
        }
    };
    let client_id = state.next_client_id;
    state.next_client_id += 1;
    state.clients.insert(client_id, iteration_id);
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        it.clients.insert(client_id);
    }
    Ok(Response::Iteration { iteration_id, client_id })
}

/// Creates a task and assigns it to the worker; the caller adds it to the iteration.
/// For a static job the task reads the worker's shard: its position in the job's
/// `static_workers`.
fn new_task(state: &mut State, job_id: JobId, iteration_id: IterationId, address: &str) -> TaskId {
    let task_id = state.next_task_id;
    state.next_task_id += 1;
    let worker_index = state.jobs.get(&job_id).and_then(|j| shard_of(j, address)).unwrap_or(0);
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
        w.active_tasks.insert(task_id);
    }
    task_id
}

/// The job of an iteration.
fn job_of(state: &State, iteration_id: IterationId) -> Option<&Job> {
    state.iterations.get(&iteration_id).and_then(|it| state.jobs.get(&it.job_id))
}

/// A worker's shard index in a static job; `None` when the job is not static or
/// the worker is not in its list.
fn shard_of(job: &Job, address: &str) -> Option<u32> {
    job.mode.static_policy()?;
    job.static_workers.iter().position(|a| a == address).map(|i| i as u32)
}

/// Whether a worker at `address` takes part in an iteration: every worker for OFF
/// and DYNAMIC, only the listed ones for a static mode.
fn takes_part(state: &State, iteration_id: IterationId, address: &str) -> bool {
    match job_of(state, iteration_id) {
        Some(job) if job.mode.static_policy().is_some() => {
            job.static_workers.iter().any(|a| a == address)
        }
        Some(_) => true,
        None => false,
    }
}

/// Every task of the iteration reached end of sequence, and (static modes) every
/// shard has a task: a worker of the list that has not registered yet still owes
/// its shard.
pub(crate) fn iteration_complete(state: &State, it: &Iteration) -> bool {
    let tasks: Vec<&Task> = it.tasks.iter().filter_map(|t| state.tasks.get(t)).collect();
    if !tasks.iter().all(|t| t.finished) {
        return false;
    }
    match state.jobs.get(&it.job_id) {
        Some(job) if job.mode.static_policy().is_some() => {
            let shards: BTreeSet<u32> = tasks.iter().map(|t| t.worker_index).collect();
            shards.len() == job.static_workers.len()
        }
        _ => true,
    }
}

fn release_client(state: &mut State, client_id: ClientId) -> Result<Response, StateError> {
    let iteration_id = state.clients.remove(&client_id).ok_or_else(|| {
        StateError::not_found_hint(
            "iteration client",
            client_id.to_string(),
            "; it was already released",
        )
    })?;
    if let Some(it) = state.iterations.get_mut(&iteration_id) {
        it.clients.remove(&client_id);
    }
    Ok(Response::ClientReleased)
}

fn register_worker(
    state: &mut State,
    address: String,
    worker_uid: u64,
    functions: Vec<String>,
) -> Result<Response, StateError> {
    if address.is_empty() {
        return Err(StateError::InvalidArgument("worker address must not be empty".into()));
    }
    crate::apply_liveness::record_restart_loss(state, &address, worker_uid);
    let worker = state.workers.entry(address.clone()).or_insert_with(|| Worker {
        address: address.clone(),
        worker_uid,
        functions: BTreeSet::new(),
        active_tasks: BTreeSet::new(),
        lost: false,
    });
    worker.worker_uid = worker_uid;
    worker.lost = false;
    worker.functions = functions.into_iter().collect();
    // A worker gets a task in every unfinished iteration it has none in: a new
    // worker joins running iterations, and a restarted one keeps the tasks it had.
    // A task ended because the worker was lost does not count: the worker, back,
    // gets a fresh one (OFF: a whole copy again; static: its shard again).
    let has_task: BTreeSet<IterationId> = state
        .tasks
        .values()
        .filter(|t| t.worker_address == address && !t.lost && !coordinated::is_removed(state, t))
        .map(|t| t.iteration_id)
        .collect();
    let missing: Vec<(JobId, IterationId)> = state
        .iterations
        .values()
        .filter(|it| it.is_live() && !has_task.contains(&it.id))
        .filter(|it| takes_part(state, it.id, &address))
        .map(|it| (it.job_id, it.id))
        .collect();
    for (job_id, iteration_id) in missing {
        let task_id = new_task(state, job_id, iteration_id, &address);
        // A coordinated iteration's consumers read it only from an agreed round.
        coordinated::add_task(state, iteration_id, task_id);
    }
    let tasks = state.worker_tasks(&address).iter().map(|t| t.id).collect();
    Ok(Response::WorkerRegistered { tasks })
}

fn finish_tasks(
    state: &mut State,
    worker_address: &str,
    task_ids: &[TaskId],
) -> Result<Response, StateError> {
    if !state.workers.contains_key(worker_address) {
        return Err(StateError::not_found_hint(
            "worker",
            worker_address.to_string(),
            "; register the worker again",
        ));
    }
    let mut touched = BTreeSet::new();
    for id in task_ids {
        let Some(task) = state.tasks.get_mut(id) else { continue };
        if task.worker_address != worker_address || task.finished {
            continue;
        }
        task.finished = true;
        touched.insert(task.iteration_id);
        if let Some(w) = state.workers.get_mut(worker_address) {
            w.active_tasks.remove(id);
        }
    }
    let mut finished_iterations = vec![];
    for iteration_id in touched {
        let all_done =
            state.iterations.get(&iteration_id).is_some_and(|it| iteration_complete(state, it));
        if let Some(it) = state.iterations.get_mut(&iteration_id) {
            if all_done && !it.finished {
                it.finished = true;
                finished_iterations.push(iteration_id);
            }
        }
    }
    Ok(Response::TasksFinished { finished_iterations })
}

fn get_split(
    state: &mut State,
    task_id: TaskId,
    worker_uid: u64,
    sequence: u64,
    provider: u32,
    repetition: u64,
    max_splits: u32,
) -> Result<Response, StateError> {
    let task = state.tasks.get(&task_id).ok_or_else(|| StateError::not_found("task", task_id))?;
    // A task ended by liveness or GC takes nothing more, not even a replay of a
    // range already counted as lost: its worker is told to delete it.
    let collected = state.iterations.get(&task.iteration_id).is_some_and(|i| i.garbage_collected);
    if task.lost || (collected && task.finished) {
        return Ok(Response::Split(SplitAnswer::EndOfSplits));
    }
    if let Some(last) = task.last_split.filter(|l| l.worker_uid == worker_uid) {
        if sequence == last.sequence {
            // A retry whose answer was lost: the same split again, never a second one.
            return Ok(Response::Split(last.answer));
        }
        if sequence != last.sequence + 1 {
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
        let closed = SplitCursor { repetition: cursor.repetition + 1, next: 0 };
        return (SplitAnswer::EndOfSplits, closed);
    }
    let end = cursor.next.saturating_add(step).min(cardinality);
    (SplitAnswer::Split { begin: cursor.next, end }, SplitCursor { next: end, ..cursor })
}
