//! `GetOrCreateExactlyOnceJob`: a job asked with `require_exactly_once`.
//!
//! Refused (FailedPrecondition, saying what to change) unless the job can be
//! replayed: DYNAMIC, no cross-trainer cache, no coordinated reads, and a
//! pipeline the handler found replayable (its reason otherwise). A named job
//! that exists exactly-once is joined; one that exists at-most-once is refused
//! (its readers may already have lost elements, and it cannot change delivery).

use sluice_positions::UnitRecords;

use super::super::jobs::{self, NewJob};
use crate::command::Response;
use crate::error::StateError;
use crate::limits::Limits;
use crate::state::{Mode, State};

pub(crate) fn get_or_create(
    state: &mut State,
    job: NewJob,
    static_workers: Vec<String>,
    num_consumers: Option<u32>,
    replay: Result<UnitRecords, String>,
    limits: &Limits,
) -> Result<Response, StateError> {
    let refused = |why: String| {
        StateError::FailedPrecondition(format!(
            "cannot give job {} exactly-once delivery: {why}; read it without \
             require_exactly_once (at-most-once), or change the job",
            job.job_name.as_deref().map_or("(anonymous)".to_string(), |n| format!("`{n}`"))
        ))
    };
    if num_consumers.is_some() {
        return Err(refused(
            "coordinated reads (num_consumers) hand rounds to fixed consumers and cannot \
             hand a lost worker's records out again"
                .into(),
        ));
    }
    if job.cross_trainer_cache {
        return Err(refused(
            "with the cross-trainer cache every trainer reads every element, so there is no \
             single consumption to count"
                .into(),
        ));
    }
    if job.mode != Mode::Dynamic {
        return Err(refused(format!(
            "only a DYNAMIC job (distributed_epoch) hands out units it can hand out again, \
             and this request asked for mode={}",
            job.mode.name()
        )));
    }
    if !state.datasets.contains_key(&job.dataset_id) {
        return Err(StateError::not_found_hint(
            "dataset",
            &job.dataset_id,
            "; register it first (sluice register, or Client::register_dataset)",
        ));
    }
    let existing = job.job_name.as_deref().and_then(|n| state.jobs_by_name.get(n)).copied();
    if let Some(job_id) = existing {
        if state.jobs.get(&job_id).is_some_and(|j| j.num_consumers.is_some()) {
            return Err(refused("the job exists with coordinated reads (num_consumers)".into()));
        }
        let name = job.job_name.clone().unwrap_or_default();
        // Joining: the same identity checks as any join (nothing changes).
        let joined = jobs::get_or_create_job(state, job, static_workers, limits)?;
        if !state.exactly_once.is_exactly_once(job_id) {
            return Err(StateError::FailedPrecondition(format!(
                "job `{name}` already exists with at-most-once delivery (it was created \
                 without require_exactly_once), and a job's delivery does not change; read it \
                 without require_exactly_once, or use another job name for an exactly-once \
                 read"
            )));
        }
        return Ok(joined);
    }
    let rule = replay.map_err(|why| refused(format!("its pipeline cannot be replayed: {why}")))?;
    match jobs::get_or_create_job(state, job, static_workers, limits)? {
        Response::Job { job_id, job_name, .. } => {
            state.exactly_once.jobs.insert(job_id, rule);
            Ok(Response::Job { job_id, job_name, exactly_once: true })
        }
        other => Ok(other),
    }
}
