//! Exactly-once requests and answers on the wire (docs/exactly-once.md): the
//! commands a `GetOrCreateJob` with `require_exactly_once`, a restoring
//! `GetOrCreateIteration` and a heartbeat's `ConsumedReport` become, and what
//! the answers say about delivery. Kept apart from `service.rs` so the handlers
//! stay thin; everything here is checked before it is proposed.

use sluice_positions::{Position, UnitRecords};
use sluice_proto::v1 as pb;
use tonic::Status;

use crate::command::{Command, RestorePoint};
use crate::limits::Limits;
use crate::order::Order;
use crate::state::{Mode, State, TargetWorkers};

/// The job command of a `GetOrCreateJob`: with `require_exactly_once`, the
/// exactly-once one carrying the handler's replayability check; with a
/// deterministic order too, the ordered one carrying its order check.
#[allow(clippy::too_many_arguments)]
pub fn job_command(
    req: &pb::GetOrCreateJobRequest,
    mode: Mode,
    target_workers: TargetWorkers,
    static_workers: Vec<String>,
    replay: Result<UnitRecords, String>,
    ordered: Result<(), String>,
    limits: Limits,
    existing_at_most_once: bool,
) -> Result<Command, Status> {
    check_deterministic(req)?;
    let dataset_id = req.dataset_id.clone();
    let job_name = Some(req.job_name.clone()).filter(|n| !n.is_empty());
    let (cross_trainer_cache, num_consumers) = (req.use_cross_trainer_cache, req.num_consumers);
    // Asked "where possible": exactly-once only where the state machine would
    // not refuse it (`at_most_once_reason` names why not).
    let preferred = req.prefer_exactly_once
        && !existing_at_most_once
        && mode == Mode::Dynamic
        && !cross_trainer_cache
        && num_consumers.is_none()
        && replay.is_ok();
    Ok(if let (true, Some(d)) = (req.require_exactly_once, &req.deterministic) {
        Command::GetOrCreateOrderedJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
            replay,
            limits,
            order: Order { seed: d.seed, consumers: d.num_consumers },
            ordered,
        }
    } else if req.require_exactly_once || preferred {
        Command::GetOrCreateExactlyOnceJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
            replay,
            limits,
        }
    } else {
        Command::GetOrCreateJob {
            dataset_id,
            mode,
            job_name,
            target_workers,
            static_workers,
            cross_trainer_cache,
            num_consumers,
            limits,
        }
    })
}

/// A deterministic order asks for exactly-once delivery and at least one
/// consumer (INVALID_ARGUMENT / FAILED_PRECONDITION, saying which option).
fn check_deterministic(req: &pb::GetOrCreateJobRequest) -> Result<(), Status> {
    let Some(d) = &req.deterministic else { return Ok(()) };
    if !req.require_exactly_once {
        return Err(Status::failed_precondition(
            "a deterministic order needs exactly-once delivery: ask with \
             require_exactly_once (ReadOptions::exactly_once, Python exactly_once=True, \
             sluice read --exactly-once)",
        ));
    }
    let max = crate::order::MAX_CONSUMERS;
    if d.num_consumers == 0 || d.num_consumers > max {
        return Err(Status::invalid_argument(format!(
            "deterministic.num_consumers is {}: give the number of consumers (1 to {max}) \
             that read the job",
            d.num_consumers
        )));
    }
    Ok(())
}

/// The iteration command of a `GetOrCreateIteration`: a restore when it carries
/// a position (refused, saying so, if the position does not decode).
pub fn iteration_command(
    req: &pb::GetOrCreateIterationRequest,
    elements_per_split: u64,
    limits: Limits,
) -> Result<Command, Status> {
    let (job_id, repetition) = (req.job_id, req.repetition);
    let Some(p) = &req.restore else {
        return Ok(Command::GetOrCreateIteration {
            job_id,
            repetition,
            elements_per_split,
            limits,
        });
    };
    let position = Position::from_pb(p)
        .map_err(|e| Status::invalid_argument(format!("GetOrCreateIteration.restore: {e}")))?;
    let key = position.restore_key();
    let position = RestorePoint {
        job_name: position.job_name,
        dataset_id: position.dataset_id,
        repetition: position.repetition,
        generation: position.generation,
        consumed: position.consumed,
        key,
    };
    Ok(Command::RestoreIteration { job_id, repetition, elements_per_split, position, limits })
}

pub fn delivery_to_wire(exactly_once: bool) -> pb::Delivery {
    if exactly_once {
        pb::Delivery::ExactlyOnce
    } else {
        pb::Delivery::AtMostOnce
    }
}

/// Why a job the handler answers is at-most-once (`GetOrCreateJobResponse`).
pub fn at_most_once_reason(
    mode: Mode,
    cross_trainer_cache: bool,
    num_consumers: Option<u32>,
    replay: Result<UnitRecords, String>,
    existing_at_most_once: Option<&str>,
) -> String {
    if mode != Mode::Dynamic {
        return format!(
            "only DYNAMIC jobs (distributed_epoch) can be exactly-once; this job is {}",
            mode.name()
        );
    }
    if cross_trainer_cache {
        return "jobs with the cross-trainer cache are at-most-once".into();
    }
    if num_consumers.is_some() {
        return "jobs with coordinated reads (num_consumers) are at-most-once".into();
    }
    match (replay, existing_at_most_once) {
        (Err(why), _) => format!("the pipeline cannot be replayed: {why}"),
        (Ok(_), Some(name)) => format!(
            "job `{name}` was created at-most-once by a reader that did not ask for \
             exactly-once; readers joining it get what it was created with (use another job \
             name for an exactly-once read)"
        ),
        (Ok(_), None) => "exactly-once delivery is opt-in: create the job with \
                          require_exactly_once or prefer_exactly_once (Rust \
                          ReadOptions::exactly_once(true) or exactly_once_auto(true), Python \
                          exactly_once=True or \"auto\")"
            .into(),
    }
}

/// Whether a heartbeat's consumed report needs a command: it has records, ends,
/// acknowledgements, or a generation to record.
pub fn report_matters(r: &pb::ConsumedReport) -> bool {
    !r.runs.is_empty()
        || !r.firsts.is_empty()
        || !r.unit_ends.is_empty()
        || !r.lost_tasks_done.is_empty()
        || r.generation > 0
}

/// Whether a report carries nothing but its generation.
pub fn report_is_only_known_generation(r: &pb::ConsumedReport) -> bool {
    r.runs.is_empty()
        && r.firsts.is_empty()
        && r.unit_ends.is_empty()
        && r.lost_tasks_done.is_empty()
}

/// The generation recorded for an exactly-once iteration's consumer.
pub fn client_generation(s: &State, client_id: u64) -> Option<u64> {
    let iteration_id = s.clients.get(&client_id)?;
    s.exactly_once.iterations.get(iteration_id)?.client_generations.get(&client_id).copied()
}

/// A heartbeat's `ConsumedReport` as the command that applies it; refuses a
/// malformed one, and more than `MAX_REPORT_RUNS` runs before decoding them.
pub fn report_command(client_id: u64, r: &pb::ConsumedReport) -> Result<Command, Status> {
    use crate::exactly_once::MAX_REPORT_RUNS;
    let too_many = |n: usize, what: &str| {
        Status::invalid_argument(format!(
            "ClientHeartbeatRequest.consumed carries {n} {what}, above the limit of \
             {MAX_REPORT_RUNS}; send the rest in the next heartbeat"
        ))
    };
    if r.runs.len() / 3 > MAX_REPORT_RUNS {
        return Err(too_many(r.runs.len() / 3, "runs"));
    }
    if r.unit_ends.len() / 2 > MAX_REPORT_RUNS {
        return Err(too_many(r.unit_ends.len() / 2, "unit ends"));
    }
    if r.firsts.len() / 2 > MAX_REPORT_RUNS {
        return Err(too_many(r.firsts.len() / 2, "spans of first records"));
    }
    if r.lost_tasks_done.len() > MAX_REPORT_RUNS {
        return Err(too_many(r.lost_tasks_done.len(), "lost tasks"));
    }
    let bad = |e: sluice_positions::PositionError| {
        Status::invalid_argument(format!("ClientHeartbeatRequest.consumed: {e}"))
    };
    let runs = sluice_positions::wire::runs_from_flat(&r.runs).map_err(bad)?;
    let unit_ends = sluice_positions::wire::ends_from_flat(&r.unit_ends).map_err(bad)?;
    let lost_tasks_done = r.lost_tasks_done.clone();
    let generation = r.generation;
    if r.firsts.is_empty() {
        return Ok(Command::ReportConsumed {
            client_id,
            generation,
            runs,
            unit_ends,
            lost_tasks_done,
        });
    }
    let firsts = sluice_positions::wire::spans_from_flat(&r.firsts).map_err(bad)?;
    Ok(Command::ReportConsumedSpans {
        client_id,
        generation,
        runs,
        firsts,
        unit_ends,
        lost_tasks_done,
    })
}
