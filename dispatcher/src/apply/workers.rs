//! `RegisterWorker`: a worker registers, or registers again (after a dispatcher
//! restart, after being declared lost, or as a new process with a new uid), and
//! gets a task in every live iteration it takes part in and has none in (one
//! whose pipeline has Python stages only if its Python can run them). What a
//! registration with a new uid costs the predecessor's split ranges is recorded by
//! `liveness.rs`; a coordinated iteration's new task waits in `coordinated.rs`.

use std::collections::BTreeSet;

use sluice_dataset::python::parse_version;

use super::{coordinated, iterations, liveness};
use crate::command::Response;
use crate::error::StateError;
use crate::limits::Limits;
use crate::state::{IterationId, JobId, State, Worker};

/// The longest `python_version` a worker may register (`3.11.7` is 6 bytes).
const MAX_PYTHON_VERSION_BYTES: usize = 32;

/// What a worker says it can run.
pub(super) struct Capabilities {
    /// Registry functions ("map:square", ...).
    pub functions: Vec<String>,
    /// The Python version of its Python processes; `None`: no Python stages.
    pub python_version: Option<String>,
}

pub(super) fn register_worker(
    state: &mut State,
    address: String,
    worker_uid: u64,
    capabilities: Capabilities,
    limits: &Limits,
) -> Result<Response, StateError> {
    let Capabilities { functions, python_version } = capabilities;
    if address.is_empty() {
        return Err(StateError::InvalidArgument("worker address must not be empty".into()));
    }
    let python_version = python_version.filter(|v| !v.is_empty());
    if let Some(v) = &python_version {
        // Kept in the replicated state and shown in refusals: a version, nothing else.
        if v.len() > MAX_PYTHON_VERSION_BYTES || parse_version(v).is_none() {
            let shown: String = v.chars().take(MAX_PYTHON_VERSION_BYTES).collect();
            return Err(StateError::InvalidArgument(format!(
                "python_version `{shown}` is not a Python version: a worker registers its \
                 pool's `MAJOR.MINOR[.PATCH]` (at most {MAX_PYTHON_VERSION_BYTES} bytes), or \
                 nothing when it runs no Python stages"
            )));
        }
    }
    liveness::record_restart_loss(state, &address, worker_uid);
    let worker = state.workers.entry(address.clone()).or_insert_with(|| Worker {
        address: address.clone(),
        worker_uid,
        functions: BTreeSet::new(),
        active_tasks: Default::default(),
        lost: false,
        python_version: None,
    });
    worker.worker_uid = worker_uid;
    worker.lost = false;
    worker.functions = functions.into_iter().collect();
    // Before the tasks below: which iterations it takes part in depends on it.
    worker.python_version = python_version;
    // A worker gets a task in every unfinished iteration it has none in: a new
    // worker joins running iterations, and a restarted one keeps the tasks it had.
    // A task ended because the worker was lost does not count: the worker, back,
    // gets a fresh one (OFF: a whole copy again; static: its shard again).
    let has_task: BTreeSet<IterationId> = state
        .tasks
        .values()
        .filter(|t| t.worker_address == address && !t.lost && !state.is_removed(t))
        .map(|t| t.iteration_id)
        .collect();
    // Up to its cap of unfinished tasks, oldest iterations first (a worker at
    // its cap takes no part in the rest; `GetOrCreateIteration` refuses new
    // iterations while a worker is at its cap, so this happens only to a worker
    // that registers while more iterations than the cap are running).
    let room =
        limits.max_tasks_per_worker.saturating_sub(state.worker_tasks(&address).len() as u64);
    let missing: Vec<(JobId, IterationId)> = state
        .iterations
        .values()
        .filter(|it| it.is_live() && !has_task.contains(&it.id))
        .filter(|it| state.takes_part(it.id, &address))
        .map(|it| (it.job_id, it.id))
        .take(usize::try_from(room).unwrap_or(usize::MAX))
        .collect();
    for (job_id, iteration_id) in missing {
        let task_id = iterations::new_task(state, job_id, iteration_id, &address);
        // A coordinated iteration's consumers read it only from an agreed round.
        coordinated::add_task(state, iteration_id, task_id);
    }
    let tasks = state.worker_tasks(&address).iter().map(|t| t.id).collect();
    Ok(Response::WorkerRegistered { tasks })
}
