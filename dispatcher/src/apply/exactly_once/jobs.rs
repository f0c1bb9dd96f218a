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
use crate::order::Order;
use crate::quotas::Admission;
use crate::state::{Mode, State};

pub(crate) fn get_or_create(
    state: &mut State,
    job: NewJob,
    static_workers: Vec<String>,
    num_consumers: Option<u32>,
    replay: Result<UnitRecords, String>,
    admit: &Admission,
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
        if let Some(o) = state.exactly_once.order_of(job_id) {
            return Err(refused(format!(
                "the job is read in a deterministic order (seed {}, {} consumers); read it \
                 with the same deterministic options and a consumer index",
                o.seed, o.consumers
            )));
        }
        let name = job.job_name.clone().unwrap_or_default();
        // Joining: the same identity checks as any join (nothing changes).
        let joined = jobs::get_or_create_job(state, job, static_workers, admit)?;
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
    match jobs::get_or_create_job(state, job, static_workers, admit)? {
        Response::Job { job_id, job_name, .. } => {
            state.exactly_once.jobs.insert(job_id, rule);
            Ok(Response::Job { job_id, job_name, exactly_once: true })
        }
        other => Ok(other),
    }
}

/// What `GetOrCreateExactlyOnceJob` carries, for the ordered variant.
pub(crate) struct ExactlyOnceJob {
    pub job: NewJob,
    pub static_workers: Vec<String>,
    pub num_consumers: Option<u32>,
    pub replay: Result<UnitRecords, String>,
}

/// `GetOrCreateOrderedJob`: an exactly-once job read in `order`. Refused
/// (FailedPrecondition) when the pipeline's order is not deterministic
/// (`ordered`), and when a job of that name exists without this very order
/// (the order is part of the job's identity: its consumers must agree).
pub(crate) fn get_or_create_ordered(
    state: &mut State,
    eo: ExactlyOnceJob,
    order: Order,
    ordered: Result<(), String>,
    admit: &Admission,
) -> Result<Response, StateError> {
    let name = eo.job.job_name.as_deref().map_or("(anonymous)".to_string(), |n| format!("`{n}`"));
    if order.consumers == 0 || order.consumers > crate::order::MAX_CONSUMERS {
        return Err(StateError::InvalidArgument(format!(
            "job {name}: a deterministic order needs 1 <= num_consumers <= {}, got {}",
            crate::order::MAX_CONSUMERS,
            order.consumers
        )));
    }
    if let Err(why) = ordered {
        return Err(StateError::FailedPrecondition(format!(
            "cannot read job {name} in a deterministic order: {why}"
        )));
    }
    let existing = eo.job.job_name.as_deref().and_then(|n| state.jobs_by_name.get(n)).copied();
    if let Some(job_id) = existing {
        let had = state.exactly_once.order_of(job_id);
        if had != Some(order) {
            let has = had.map_or("no deterministic order".to_string(), |o| {
                format!("seed {} and {} consumers", o.seed, o.consumers)
            });
            return Err(StateError::FailedPrecondition(format!(
                "job {name} exists with {has}, and this reader asked for seed {} and {} \
                 consumers; a job's order does not change: read it with its options, or use \
                 another job name",
                order.seed, order.consumers
            )));
        }
        // Skip the plain join's refusal of an ordered job: this reader agrees.
        let ExactlyOnceJob { job, static_workers, .. } = eo;
        return jobs::get_or_create_job(state, job, static_workers, admit).map(|r| match r {
            Response::Job { job_id, job_name, .. } => {
                Response::Job { job_id, job_name, exactly_once: true }
            }
            other => other,
        });
    }
    let response =
        get_or_create(state, eo.job, eo.static_workers, eo.num_consumers, eo.replay, admit)?;
    if let Response::Job { job_id, .. } = &response {
        state.exactly_once.orders.insert(*job_id, order);
    }
    Ok(response)
}
