//! Helpers shared by the pure state-machine tests: apply a command that must
//! succeed, and the common steps (an iteration, a worker, a job, a split, a
//! task report) with their answers unpacked.
#![allow(dead_code)]

use sluice_dataset::DatasetDef;
use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};

pub fn ok(s: &mut State, c: Command) -> Response {
    apply(s, c).expect("command applies")
}

/// Registers `def` under a derived id; returns the id.
pub fn register(s: &mut State, def: DatasetDef) -> String {
    match ok(s, Command::RegisterDataset { dataset_id: None, def, limits: Limits::default() }) {
        Response::DatasetRegistered { dataset_id } => dataset_id,
        r => panic!("{r:?}"),
    }
}

/// Gets or creates repetition 0 of `job_id`; returns (iteration id, client id).
pub fn iteration(s: &mut State, job_id: u64, elements_per_split: u64) -> (u64, u64) {
    let c = Command::GetOrCreateIteration {
        job_id,
        repetition: 0,
        elements_per_split,
        limits: Limits::default(),
    };
    match ok(s, c) {
        Response::Iteration { iteration_id, client_id } => (iteration_id, client_id),
        r => panic!("{r:?}"),
    }
}

/// Registers a worker; returns its unfinished tasks.
pub fn worker(s: &mut State, addr: &str, uid: u64) -> Vec<u64> {
    python_worker(s, addr, uid, None)
}

/// Registers a worker whose Python processes run `python` (`None`: no Python
/// stages); returns its unfinished tasks.
pub fn python_worker(s: &mut State, addr: &str, uid: u64, python: Option<&str>) -> Vec<u64> {
    let c = Command::RegisterWorker {
        address: addr.into(),
        worker_uid: uid,
        functions: vec![],
        python_version: python.map(String::from),
        limits: Limits::default(),
    };
    match ok(s, c) {
        Response::WorkerRegistered { tasks } => tasks,
        r => panic!("{r:?}"),
    }
}

/// Gets or creates an OFF job over `ds` (named or not), with or without the
/// cross-trainer cache and coordinated reads; returns its id, or the refusal.
pub fn off_job(
    s: &mut State,
    ds: &str,
    name: Option<&str>,
    cross_trainer_cache: bool,
    num_consumers: Option<u32>,
) -> Result<u64, StateError> {
    let c = Command::GetOrCreateJob {
        dataset_id: ds.into(),
        mode: Mode::Off,
        job_name: name.map(String::from),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache,
        num_consumers,
        limits: Limits::default(),
    };
    apply(s, c).map(|r| match r {
        Response::Job { job_id, .. } => job_id,
        r => panic!("{r:?}"),
    })
}

pub fn job(s: &mut State, ds: &str, mode: Mode, name: Option<&str>) -> Result<u64, StateError> {
    job_with(s, ds, mode, name, TargetWorkers::Auto, &[])
}

pub fn job_with(
    s: &mut State,
    ds: &str,
    mode: Mode,
    name: Option<&str>,
    target_workers: TargetWorkers,
    static_workers: &[&str],
) -> Result<u64, StateError> {
    let c = Command::GetOrCreateJob {
        dataset_id: ds.into(),
        mode,
        job_name: name.map(String::from),
        target_workers,
        static_workers: static_workers.iter().map(|a| a.to_string()).collect(),
        cross_trainer_cache: false,
        num_consumers: None,
        limits: Limits::default(),
    };
    apply(s, c).map(|r| match r {
        Response::Job { job_id, .. } => job_id,
        r => panic!("{r:?}"),
    })
}

pub fn split(s: &mut State, task: u64, uid: u64, seq: u64, rep: u64) -> SplitAnswer {
    grant(s, task, uid, seq, rep, 1)
}

/// The `GetSplit` of provider 0.
pub fn get_split(task: u64, uid: u64, seq: u64, rep: u64, max_splits: u32) -> Command {
    Command::GetSplit {
        task_id: task,
        worker_uid: uid,
        sequence: seq,
        provider: 0,
        repetition: rep,
        max_splits,
    }
}

pub fn grant(
    s: &mut State,
    task: u64,
    uid: u64,
    seq: u64,
    rep: u64,
    max_splits: u32,
) -> SplitAnswer {
    match ok(s, get_split(task, uid, seq, rep, max_splits)) {
        Response::Split(a) => a,
        r => panic!("{r:?}"),
    }
}

pub fn finish(s: &mut State, address: &str, task_ids: Vec<u64>) -> Vec<u64> {
    let worker_uid = s.workers[address].worker_uid;
    let c = Command::FinishTasks { worker_address: address.into(), worker_uid, task_ids };
    match ok(s, c) {
        Response::TasksFinished { finished_iterations } => finished_iterations,
        r => panic!("{r:?}"),
    }
}
pub mod eo;
