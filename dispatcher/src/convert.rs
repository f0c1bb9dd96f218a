//! Wire ↔ domain conversions and the one mapping of errors to `tonic::Status`.

use sluice_dataset::{DatasetDef, DatasetError};
use sluice_positions::{Run, UnitRecords};
use sluice_proto::v1 as pb;
use tonic::Status;

use crate::error::{ProposeError, StateError};
use crate::state::{Iteration, Mode, SplitAnswer, State, TargetWorkers, Task};

impl From<StateError> for Status {
    fn from(e: StateError) -> Status {
        let msg = e.to_string();
        match e {
            StateError::NotFound { .. } => Status::not_found(msg),
            StateError::InvalidArgument(_) => Status::invalid_argument(msg),
            StateError::AlreadyExists(_) => Status::already_exists(msg),
            StateError::FailedPrecondition(_) => Status::failed_precondition(msg),
            StateError::ResourceExhausted(_) => Status::resource_exhausted(msg),
        }
    }
}

impl From<ProposeError> for Status {
    fn from(e: ProposeError) -> Status {
        match e {
            ProposeError::Rejected(e) => e.into(),
            ProposeError::NotLeader { node_id, leader_id, leader_address } => {
                let msg = match (&leader_id, &leader_address) {
                    (Some(l), Some(a)) => format!(
                        "dispatcher node {node_id} is not the leader; the leader is node {l} at {a}"
                    ),
                    _ => format!(
                        "dispatcher node {node_id} is not the leader and no leader is elected yet; \
                         retry shortly"
                    ),
                };
                let status = Status::unavailable(msg);
                match leader_address {
                    Some(a) => sluice_proto::contract::with_leader_address(status, &a),
                    None => status,
                }
            }
            ProposeError::Unavailable(m) => Status::unavailable(m),
        }
    }
}

pub fn dataset_error(e: DatasetError) -> Status {
    Status::invalid_argument(e.to_string())
}

pub fn mode_from_wire(v: i32) -> Result<Mode, Status> {
    match pb::ProcessingMode::try_from(v) {
        Ok(pb::ProcessingMode::Off) => Ok(Mode::Off),
        Ok(pb::ProcessingMode::Dynamic) => Ok(Mode::Dynamic),
        Ok(pb::ProcessingMode::File) => Ok(Mode::File),
        Ok(pb::ProcessingMode::Data) => Ok(Mode::Data),
        Ok(pb::ProcessingMode::FileOrData) => Ok(Mode::FileOrData),
        Ok(pb::ProcessingMode::Hint) => Ok(Mode::Hint),
        _ => Err(Status::invalid_argument(format!(
            "processing mode {v} is not supported; use OFF (parallel_epochs), DYNAMIC \
             (distributed_epoch), FILE, DATA, FILE_OR_DATA or HINT"
        ))),
    }
}

pub fn mode_to_wire(m: Mode) -> pb::ProcessingMode {
    match m {
        Mode::Off => pb::ProcessingMode::Off,
        Mode::Dynamic => pb::ProcessingMode::Dynamic,
        Mode::File => pb::ProcessingMode::File,
        Mode::Data => pb::ProcessingMode::Data,
        Mode::FileOrData => pb::ProcessingMode::FileOrData,
        Mode::Hint => pb::ProcessingMode::Hint,
    }
}

pub fn target_workers_from_wire(v: i32) -> Result<TargetWorkers, Status> {
    match pb::TargetWorkers::try_from(v) {
        Ok(pb::TargetWorkers::Auto) => Ok(TargetWorkers::Auto),
        Ok(pb::TargetWorkers::Any) => Ok(TargetWorkers::Any),
        Ok(pb::TargetWorkers::Local) => Ok(TargetWorkers::Local),
        Err(_) => Err(Status::invalid_argument(format!(
            "target_workers {v} is not supported; use AUTO, ANY or LOCAL"
        ))),
    }
}

/// A GetSplit answer; `skip_runs`: the consumed records of an exactly-once
/// grant's units, which the worker's source skips.
pub fn split_to_wire(
    a: SplitAnswer,
    skip_runs: Vec<Run>,
    place: Option<crate::order::Place>,
) -> pb::GetSplitResponse {
    match a {
        SplitAnswer::Split { begin, end } => {
            let mut flat = Vec::with_capacity(skip_runs.len() * 3);
            sluice_positions::wire::runs_to_flat(skip_runs, &mut flat);
            let split = pb::Split {
                begin,
                end,
                skip_runs: flat,
                order_index: place.map(|p| p.index),
                order_begin: place.map_or(0, |p| p.begin),
                order_end: place.map_or(0, |p| p.end),
                order_floor: place.map_or(0, |p| p.floor),
            };
            pb::GetSplitResponse { split: Some(split), end_of_splits: false, wait: false }
        }
        SplitAnswer::EndOfSplits => {
            pb::GetSplitResponse { split: None, end_of_splits: true, wait: false }
        }
        SplitAnswer::Wait => pb::GetSplitResponse { split: None, end_of_splits: false, wait: true },
    }
}

pub fn def_from_wire(d: Option<pb::DatasetDef>) -> Result<DatasetDef, Status> {
    let d = d.ok_or_else(|| Status::invalid_argument("request has no dataset definition"))?;
    DatasetDef::try_from(d).map_err(dataset_error)
}

/// The full definition of a task, as a worker needs it to run.
pub fn task_def(state: &State, task: &Task) -> Option<pb::TaskDef> {
    let it = state.iterations.get(&task.iteration_id)?;
    let job = state.jobs.get(&it.job_id)?;
    let ds = state.datasets.get(&job.dataset_id)?;
    let rule = state.exactly_once.jobs.get(&job.id).copied();
    Some(pb::TaskDef {
        task_id: task.id,
        iteration_id: it.id,
        job_id: job.id,
        dataset_id: ds.id.clone(),
        dataset: Some(pb::DatasetDef::from(&ds.def)),
        mode: mode_to_wire(job.mode) as i32,
        num_split_providers: it.cursors.len() as u32,
        // Static modes: the shard this task reads (0 and 0 otherwise).
        num_workers: job.static_workers.len() as u32,
        worker_index: task.worker_index,
        use_cross_trainer_cache: job.cross_trainer_cache,
        num_consumers: job.num_consumers,
        job_name: job.name.clone(),
        exactly_once: rule.is_some(),
        counted_units: rule == Some(UnitRecords::Counted),
        deterministic_consumers: state.exactly_once.order_of(job.id).map(|o| o.consumers),
    })
}

/// The tasks of `it` as readers see them, in read order (the long-poll view and the
/// coordinated readers' heartbeat both answer with this list).
pub(crate) fn task_infos(s: &State, it: &Iteration) -> Vec<pb::TaskInfo> {
    let rr = it.coordinated.as_ref();
    it.tasks
        .iter()
        .filter_map(|t| s.tasks.get(t))
        .map(|t| pb::TaskInfo {
            task_id: t.id,
            worker_address: t.worker_address.clone(),
            finished: t.finished,
            lost: s.lost_task_held_elements(t),
            starting_round: t.starting_round,
            coordinated_removed: rr.is_some_and(|rr| rr.removed.contains_key(&t.id)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::eo_wire::job_command;
    use crate::limits::Limits;

    fn state_with_task(rule: Option<UnitRecords>) -> (State, Task) {
        let mut s = State::default();
        let def = DatasetDef::range(4);
        let limits = Limits::default();
        crate::apply(
            &mut s,
            Command::RegisterDataset { dataset_id: Some("d".into()), def, limits },
        )
        .unwrap();
        let req = pb::GetOrCreateJobRequest {
            dataset_id: "d".into(),
            job_name: "j".into(),
            require_exactly_once: rule.is_some(),
            ..Default::default()
        };
        let replay = rule.ok_or_else(|| "not asked".to_string());
        let cmd = job_command(
            &req,
            Mode::Dynamic,
            TargetWorkers::Auto,
            vec![],
            replay,
            Ok(()),
            limits,
            false,
        )
        .unwrap();
        crate::apply(&mut s, cmd).unwrap();
        let w = Command::RegisterWorker {
            address: "w:1".into(),
            worker_uid: 1,
            functions: vec![],
            python_version: None,
            limits,
        };
        crate::apply(&mut s, w).unwrap();
        let job_id = *s.jobs_by_name.get("j").unwrap();
        let it =
            Command::GetOrCreateIteration { job_id, repetition: 0, elements_per_split: 1, limits };
        crate::apply(&mut s, it).unwrap();
        let task = s.tasks.values().next().unwrap().clone();
        (s, task)
    }

    #[test]
    fn task_defs_say_exactly_once_and_counted_units_by_the_jobs_rule() {
        let (s, t) = state_with_task(Some(UnitRecords::Counted));
        let def = task_def(&s, &t).unwrap();
        assert!(def.exactly_once && def.counted_units);
        let (s, t) = state_with_task(Some(UnitRecords::One));
        let def = task_def(&s, &t).unwrap();
        assert!(def.exactly_once && !def.counted_units);
        let (s, t) = state_with_task(None);
        let def = task_def(&s, &t).unwrap();
        assert!(!def.exactly_once && !def.counted_units);
    }

    #[test]
    fn grants_carry_their_skip_runs_and_wait_is_neither_a_split_nor_the_end() {
        let skips = vec![Run { unit: 2, first: 1, count: 3 }];
        let r = split_to_wire(SplitAnswer::Split { begin: 2, end: 4 }, skips, None);
        assert_eq!(r.split.unwrap().skip_runs, vec![2, 1, 3]);
        let r = split_to_wire(SplitAnswer::Wait, vec![], None);
        assert!(r.wait && !r.end_of_splits && r.split.is_none());
    }
}
