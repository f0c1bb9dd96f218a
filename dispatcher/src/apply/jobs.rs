//! Datasets and the jobs over them: `RegisterDataset` and a plain
//! `GetOrCreateJob` (without `num_consumers`; `coordinated.rs` checks its own
//! conditions, then creates or joins the job here).
//!
//! A job's identity is its name with the parameters it was created with (dataset,
//! mode, target workers, cross-trainer cache): joining by name with other
//! parameters is refused, naming both. Whether the mode can divide the dataset is
//! checked here, when the job is created, because the mode is a job property.

use sluice_dataset::DatasetDef;

use crate::command::Response;
use crate::error::StateError;
use crate::limits::Limits;
use crate::owners::{DatasetRecord, Owners};
use crate::quotas::{Admission, Held};
use crate::state::{Dataset, DatasetId, Job, Mode, State, TargetWorkers};
use crate::{cache_check, python_check};

pub(super) fn register_dataset(
    state: &mut State,
    dataset_id: Option<DatasetId>,
    def: DatasetDef,
    admit: &Admission,
) -> Result<Response, StateError> {
    if let Some(id) = &dataset_id {
        if id.is_empty() {
            return Err(StateError::InvalidArgument("dataset id must not be empty".into()));
        }
        if let Some(existing) = state.datasets.get(id) {
            if existing.def == def {
                let id = id.clone();
                state.owners.dataset_used(&id);
                return Ok(Response::DatasetRegistered { dataset_id: id });
            }
            return Err(StateError::AlreadyExists(format!(
                "dataset `{id}` is already registered with a different definition; register \
                 this one under another id, or without an id to get a new one"
            )));
        }
    }
    Limits::check(state.datasets.len(), admit.limits.max_datasets, "datasets", "--max-datasets")?;
    admit.check(state, Held::Datasets)?;
    admit.check_dataset_bytes(state)?;
    if let Some(message) = python_check::conflict(&def.python_needs()) {
        return Err(StateError::InvalidArgument(message));
    }
    let id = match dataset_id {
        Some(id) => id,
        None => {
            // Ids users chose may sit anywhere up to u64::MAX: find the next free
            // one without wrapping, and refuse (changing nothing) when none is left
            // (only 2^64 automatic registrations reach that).
            let mut next = state.next_dataset_id;
            while state.datasets.contains_key(&next.to_string()) {
                next = next.checked_add(1).ok_or_else(|| {
                    StateError::FailedPrecondition(
                        "no automatic dataset id is left (the numeric ids up to 2^64-1 are \
                         taken); register this dataset under an id of your own"
                            .into(),
                    )
                })?;
            }
            state.next_dataset_id = next;
            next.to_string()
        }
    };
    // Numeric ids users chose do not move the counter (one of 2^64-1 would end
    // automatic ids for good); the search above skips them instead, at most
    // `max_datasets` steps.
    let source_cardinality = def.source_cardinality();
    state.datasets.insert(id.clone(), Dataset { id: id.clone(), def, source_cardinality });
    if let Some(charge) = admit.charge {
        let record = DatasetRecord { owner: charge.owner.clone(), bytes: charge.bytes, uses: 0 };
        state.owners.datasets.insert(id.clone(), record);
    }
    Ok(Response::DatasetRegistered { dataset_id: id })
}

/// What a `GetOrCreateJob` asks for: the job's identity.
pub(super) struct NewJob {
    pub dataset_id: DatasetId,
    pub mode: Mode,
    pub job_name: Option<String>,
    pub target_workers: TargetWorkers,
    pub cross_trainer_cache: bool,
}

pub(super) fn get_or_create_job(
    state: &mut State,
    job: NewJob,
    static_workers: Vec<String>,
    admit: &Admission,
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
                return Err(cache_check::identity_conflict(
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
            let exactly_once = state.exactly_once.is_exactly_once(job.id);
            return Ok(Response::Job { job_id: job.id, job_name: name.clone(), exactly_once });
        }
    }
    Limits::check(state.jobs.len(), admit.limits.max_jobs, "jobs", "--max-jobs")?;
    admit.check(state, Held::Jobs)?;
    let static_workers = python_static_workers(state, &dataset.def, mode, static_workers)?;
    check_sharding(&dataset.def, &dataset_id, mode, &static_workers)?;
    if cross_trainer_cache {
        cache_check::check(&dataset.def, &dataset_id, job_name.as_deref())?;
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
    state.owners.dataset_used(&dataset_id);
    Owners::record(&mut state.owners.jobs, job_id, admit.owner());
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
    Ok(Response::Job { job_id, job_name: name, exactly_once: false })
}

/// A static job over a pipeline with Python stages shards among the listed workers
/// that registered and can run it (a listed worker that cannot would leave its
/// shard unread, and one not registered yet may turn out unable to): its shard
/// count is theirs. Refused when none of the listed workers can.
fn python_static_workers(
    state: &State,
    def: &DatasetDef,
    mode: Mode,
    static_workers: Vec<String>,
) -> Result<Vec<String>, StateError> {
    let needs = def.python_needs();
    if mode.static_policy().is_none() || !needs.any() || static_workers.is_empty() {
        return Ok(static_workers);
    }
    let capable = python_check::capable_workers(&static_workers, &needs, |a| state.workers.get(a));
    if capable.is_empty() {
        let listed: Vec<_> = static_workers.iter().filter_map(|a| state.workers.get(a)).collect();
        let why = python_check::refusal(def, listed).unwrap_or_else(|| {
            "none of them has registered yet; start the workers first".to_string()
        });
        return Err(StateError::FailedPrecondition(format!(
            "cannot create a {} job: its pipeline has Python stages, and no worker of the \
             dispatcher's worker_addresses [{}] that can run them is registered: {why}",
            mode.name(),
            static_workers.join(", ")
        )));
    }
    Ok(capable)
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
