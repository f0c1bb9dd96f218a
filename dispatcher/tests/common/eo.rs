//! Steps of the exactly-once tests: an exactly-once job, a consumed report, a
//! grant with its skip runs, a restore.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::command::RestorePoint;
use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};
use sluice_positions::{RecordSet, Run, UnitRecords};

use super::{get_split, ok, register};

/// `GetOrCreateJob` with `require_exactly_once`, the replay check's answer stamped.
pub fn eo_job_cmd(
    ds: &str,
    mode: Mode,
    name: Option<&str>,
    replay: Result<UnitRecords, String>,
) -> Command {
    Command::GetOrCreateExactlyOnceJob {
        dataset_id: ds.into(),
        mode,
        job_name: name.map(String::from),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        replay,
        limits: Limits::default(),
    }
}

/// (job id, exactly_once) of a job answer.
pub fn job_answer(r: Result<Response, StateError>) -> Result<(u64, bool), StateError> {
    r.map(|r| match r {
        Response::Job { job_id, exactly_once, .. } => (job_id, exactly_once),
        r => panic!("{r:?}"),
    })
}

/// A dataset of `n` elements and an exactly-once job "eo" over it with `rule`.
pub fn eo_setup(s: &mut State, n: i64, rule: UnitRecords) -> (String, u64) {
    let ds = register(s, DatasetDef::range(n));
    let (job, eo) =
        job_answer(apply(s, eo_job_cmd(&ds, Mode::Dynamic, Some("eo"), Ok(rule)))).unwrap();
    assert!(eo);
    (ds, job)
}

pub fn report(
    s: &mut State,
    client_id: u64,
    generation: u64,
    runs: &[(u64, u64, u64)],
    ends: &[(u64, u64)],
    lost_tasks_done: &[u64],
) -> Result<Response, StateError> {
    let c = Command::ReportConsumed {
        client_id,
        generation,
        runs: runs.iter().map(|&(unit, first, count)| Run { unit, first, count }).collect(),
        unit_ends: ends.to_vec(),
        lost_tasks_done: lost_tasks_done.to_vec(),
    };
    apply(s, c)
}

/// A `ReportConsumedSpans`: record 0 of each unit of the `(begin, count)` spans,
/// beside runs.
pub fn report_spans(
    s: &mut State,
    client_id: u64,
    generation: u64,
    runs: &[(u64, u64, u64)],
    firsts: &[(u64, u64)],
) -> Result<Response, StateError> {
    let c = Command::ReportConsumedSpans {
        client_id,
        generation,
        runs: runs.iter().map(|&(unit, first, count)| Run { unit, first, count }).collect(),
        firsts: firsts.to_vec(),
        unit_ends: vec![],
        lost_tasks_done: vec![],
    };
    apply(s, c)
}

/// A GetSplit's answer and skip runs.
pub fn eo_grant(
    s: &mut State,
    task: u64,
    uid: u64,
    seq: u64,
    max_splits: u32,
) -> (SplitAnswer, Vec<Run>) {
    match ok(s, get_split(task, uid, seq, 0, max_splits)) {
        Response::Split(a) => (a, vec![]),
        Response::SplitSkipping { answer, skip_runs } => (answer, skip_runs),
        r => panic!("{r:?}"),
    }
}

pub fn restore_cmd(
    job_id: u64,
    job_name: &str,
    ds: &str,
    generation: u64,
    consumed: RecordSet,
    key: u64,
) -> Command {
    Command::RestoreIteration {
        job_id,
        repetition: 0,
        elements_per_split: 1,
        position: RestorePoint {
            job_name: job_name.into(),
            dataset_id: ds.into(),
            repetition: 0,
            generation,
            consumed,
            key,
        },
        limits: Limits::default(),
    }
}

pub fn iteration_answer(r: Response) -> (u64, u64) {
    match r {
        Response::Iteration { iteration_id, client_id } => (iteration_id, client_id),
        r => panic!("{r:?}"),
    }
}
