//! Pure tests of the state machine: no network, no clock.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::state::{SplitAnswer, SplitCursor};
use sluice_dispatcher::{apply, Command, Mode, Response, State, StateError};

fn ok(s: &mut State, c: Command) -> Response {
    apply(s, c).expect("command applies")
}

fn register(s: &mut State, def: DatasetDef) -> String {
    match ok(s, Command::RegisterDataset { dataset_id: None, def }) {
        Response::DatasetRegistered { dataset_id } => dataset_id,
        r => panic!("{r:?}"),
    }
}

fn job(s: &mut State, ds: &str, mode: Mode, name: Option<&str>) -> Result<u64, StateError> {
    let c =
        Command::GetOrCreateJob { dataset_id: ds.into(), mode, job_name: name.map(String::from) };
    apply(s, c).map(|r| match r {
        Response::Job { job_id, .. } => job_id,
        r => panic!("{r:?}"),
    })
}

fn iteration(s: &mut State, job_id: u64, eps: u64) -> (u64, u64) {
    match ok(s, Command::GetOrCreateIteration { job_id, repetition: 0, elements_per_split: eps }) {
        Response::Iteration { iteration_id, client_id } => (iteration_id, client_id),
        r => panic!("{r:?}"),
    }
}

fn worker(s: &mut State, addr: &str, uid: u64) -> Vec<u64> {
    let c = Command::RegisterWorker { address: addr.into(), worker_uid: uid, functions: vec![] };
    match ok(s, c) {
        Response::WorkerRegistered { tasks } => tasks,
        r => panic!("{r:?}"),
    }
}

fn split(s: &mut State, task: u64, uid: u64, seq: u64, rep: u64) -> SplitAnswer {
    grant(s, task, uid, seq, rep, 1)
}

fn grant(s: &mut State, task: u64, uid: u64, seq: u64, rep: u64, max_splits: u32) -> SplitAnswer {
    let c = Command::GetSplit {
        task_id: task,
        worker_uid: uid,
        sequence: seq,
        provider: 0,
        repetition: rep,
        max_splits,
    };
    match ok(s, c) {
        Response::Split(a) => a,
        r => panic!("{r:?}"),
    }
}

#[test]
fn dataset_ids_are_fresh_and_explicit_ids_are_idempotent() {
    let mut s = State::default();
    let a = register(&mut s, DatasetDef::range(3));
    let b = register(&mut s, DatasetDef::range(3));
    assert_ne!(a, b, "anonymous registrations are never de-duplicated");
    let c = Command::RegisterDataset { dataset_id: Some("mine".into()), def: DatasetDef::range(5) };
    assert_eq!(ok(&mut s, c.clone()), Response::DatasetRegistered { dataset_id: "mine".into() });
    assert_eq!(ok(&mut s, c), Response::DatasetRegistered { dataset_id: "mine".into() });
    let clash =
        Command::RegisterDataset { dataset_id: Some("mine".into()), def: DatasetDef::range(6) };
    let before = s.clone();
    assert!(matches!(apply(&mut s, clash), Err(StateError::AlreadyExists(_))));
    assert_eq!(s, before, "a refused command changes nothing");
    // A numeric explicit id pushes the automatic counter past it.
    let next: u64 = b.parse::<u64>().unwrap() + 1;
    let c =
        Command::RegisterDataset { dataset_id: Some(next.to_string()), def: DatasetDef::range(1) };
    ok(&mut s, c);
    let d = register(&mut s, DatasetDef::range(3));
    assert_ne!(d, next.to_string());
}

#[test]
fn named_jobs_are_shared_and_conflicts_name_both_parameters() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(3));
    let other = register(&mut s, DatasetDef::range(4));
    let j1 = job(&mut s, &ds, Mode::Dynamic, Some("train")).unwrap();
    let j2 = job(&mut s, &ds, Mode::Dynamic, Some("train")).unwrap();
    assert_eq!(j1, j2);
    let a1 = job(&mut s, &ds, Mode::Dynamic, None).unwrap();
    let a2 = job(&mut s, &ds, Mode::Dynamic, None).unwrap();
    assert_ne!(a1, a2, "anonymous jobs are private");
    let err = job(&mut s, &ds, Mode::Off, Some("train")).unwrap_err().to_string();
    assert!(err.contains("mode=DYNAMIC") && err.contains("mode=OFF"), "{err}");
    let err = job(&mut s, &other, Mode::Dynamic, Some("train")).unwrap_err().to_string();
    assert!(
        err.contains(&format!("dataset_id={ds}")) && err.contains(&format!("dataset_id={other}")),
        "{err}"
    );
    let err = job(&mut s, "nope", Mode::Off, None).unwrap_err().to_string();
    assert!(err.contains("dataset `nope` not found"), "{err}");
}

#[test]
fn iteration_gets_one_task_per_worker_and_finishes_when_all_do() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    worker(&mut s, "w2:1", 2);
    let ds = register(&mut s, DatasetDef::range(3));
    let j = job(&mut s, &ds, Mode::Off, Some("a")).unwrap();
    let (it, c1) = iteration(&mut s, j, 1);
    let (it2, c2) = iteration(&mut s, j, 1);
    assert_eq!(it, it2, "same (job, repetition) is one iteration");
    assert_ne!(c1, c2);
    let tasks = s.iterations[&it].tasks.clone();
    assert_eq!(tasks.len(), 2);
    let fin = Command::FinishTasks { worker_address: "w1:1".into(), task_ids: vec![tasks[0], 999] };
    assert_eq!(ok(&mut s, fin), Response::TasksFinished { finished_iterations: vec![] });
    assert!(!s.iterations[&it].finished);
    let fin = Command::FinishTasks { worker_address: "w2:1".into(), task_ids: vec![tasks[1]] };
    assert_eq!(ok(&mut s, fin), Response::TasksFinished { finished_iterations: vec![it] });
    assert!(s.iterations[&it].finished);
    ok(&mut s, Command::ReleaseClient { client_id: c1 });
    assert!(apply(&mut s, Command::ReleaseClient { client_id: c1 }).is_err());
}

#[test]
fn a_restarted_worker_keeps_its_tasks_and_a_new_one_joins_running_iterations() {
    let mut s = State::default();
    let first = worker(&mut s, "w1:1", 1);
    assert!(first.is_empty());
    let ds = register(&mut s, DatasetDef::range(3));
    let j = job(&mut s, &ds, Mode::Off, None).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    let again = worker(&mut s, "w1:1", 7);
    assert_eq!(again, s.iterations[&it].tasks, "restart returns the same unfinished task");
    let new = worker(&mut s, "w2:1", 3);
    assert_eq!(new.len(), 1);
    assert_eq!(s.iterations[&it].tasks.len(), 2);
}

#[test]
fn get_split_is_idempotent_per_key_and_never_hands_a_split_twice() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    worker(&mut s, "w2:1", 2);
    let ds = register(&mut s, DatasetDef::range(5));
    let j = job(&mut s, &ds, Mode::Dynamic, None).unwrap();
    let (it, _) = iteration(&mut s, j, 2);
    let (t1, t2) = (s.iterations[&it].tasks[0], s.iterations[&it].tasks[1]);
    let a = split(&mut s, t1, 1, 0, 0);
    assert_eq!(a, SplitAnswer::Split { begin: 0, end: 2 });
    assert_eq!(split(&mut s, t1, 1, 0, 0), a, "a replayed key gets the same split");
    assert_eq!(split(&mut s, t2, 2, 0, 0), SplitAnswer::Split { begin: 2, end: 4 });
    assert_eq!(split(&mut s, t1, 1, 1, 0), SplitAnswer::Split { begin: 4, end: 5 });
    assert_eq!(split(&mut s, t2, 2, 1, 0), SplitAnswer::EndOfSplits);
    assert_eq!(split(&mut s, t1, 1, 2, 0), SplitAnswer::EndOfSplits, "epoch 0 is closed");
    assert_eq!(s.iterations[&it].cursors[0], SplitCursor { repetition: 1, next: 0 });
    // Out-of-order sequences are refused without changing anything.
    let before = s.clone();
    let c = Command::GetSplit {
        task_id: t1,
        worker_uid: 1,
        sequence: 9,
        provider: 0,
        repetition: 0,
        max_splits: 1,
    };
    assert!(matches!(apply(&mut s, c), Err(StateError::FailedPrecondition(_))));
    assert_eq!(s, before);
    // A restarted worker (new uid) starts its sequence again and gets new splits only.
    assert_eq!(split(&mut s, t1, 42, 0, 1), SplitAnswer::Split { begin: 0, end: 2 });
}

#[test]
fn splits_only_exist_in_dynamic_mode() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let ds = register(&mut s, DatasetDef::range(5));
    let j = job(&mut s, &ds, Mode::Off, None).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    let t = s.iterations[&it].tasks[0];
    let c = Command::GetSplit {
        task_id: t,
        worker_uid: 1,
        sequence: 0,
        provider: 0,
        repetition: 0,
        max_splits: 1,
    };
    assert!(matches!(apply(&mut s, c), Err(StateError::FailedPrecondition(_))));
}

#[test]
fn replaying_the_same_commands_rebuilds_the_same_state() {
    let cmds = [
        Command::RegisterWorker {
            address: "w:1".into(),
            worker_uid: 5,
            functions: vec!["map:x".into()],
        },
        Command::RegisterDataset { dataset_id: None, def: DatasetDef::range(10).map("square") },
        Command::GetOrCreateJob {
            dataset_id: "1000".into(),
            mode: Mode::Dynamic,
            job_name: Some("j".into()),
        },
        Command::GetOrCreateIteration { job_id: 5000, repetition: 0, elements_per_split: 3 },
        Command::GetSplit {
            task_id: 4000,
            worker_uid: 5,
            sequence: 0,
            provider: 0,
            repetition: 0,
            max_splits: 1,
        },
        Command::FinishTasks { worker_address: "w:1".into(), task_ids: vec![4000] },
    ];
    let run = || {
        let mut s = State::default();
        let answers: Vec<_> = cmds.iter().cloned().map(|c| apply(&mut s, c)).collect();
        (s, answers)
    };
    let (a, ra) = run();
    let (b, rb) = run();
    assert_eq!(a, b);
    assert_eq!(ra, rb);
    assert!(ra.iter().all(|r| r.is_ok()), "{ra:?}");
}

#[test]
fn commands_and_state_round_trip_through_the_log_codec() {
    use sluice_dataset::Arg;
    let def = DatasetDef::range(10)
        .map_with("add", vec![Arg::Int(1), Arg::Float(0.5), Arg::Str("x".into())])
        .filter("identity")
        .shuffle(4, 2)
        .repeat_forever();
    let cmd = Command::RegisterDataset { dataset_id: Some("d".into()), def };
    let bytes = bincode::serialize(&cmd).unwrap();
    assert_eq!(bincode::deserialize::<Command>(&bytes).unwrap(), cmd);
    let mut s = State::default();
    ok(&mut s, cmd);
    let bytes = bincode::serialize(&s).unwrap();
    assert_eq!(bincode::deserialize::<State>(&bytes).unwrap(), s);
}

#[test]
fn a_grant_of_several_splits_is_one_range_and_replays_the_same() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let ds = register(&mut s, DatasetDef::range(100));
    let j = job(&mut s, &ds, Mode::Dynamic, None).unwrap();
    let (it, _) = iteration(&mut s, j, 2);
    let t = s.iterations[&it].tasks[0];
    assert_eq!(grant(&mut s, t, 1, 0, 0, 8), SplitAnswer::Split { begin: 0, end: 16 });
    assert_eq!(grant(&mut s, t, 1, 0, 0, 8), SplitAnswer::Split { begin: 0, end: 16 }, "replay");
    assert_eq!(
        grant(&mut s, t, 1, 1, 0, 0),
        SplitAnswer::Split { begin: 16, end: 18 },
        "0 means 1"
    );
    assert_eq!(grant(&mut s, t, 1, 2, 0, 1000), SplitAnswer::Split { begin: 18, end: 100 });
    assert_eq!(grant(&mut s, t, 1, 3, 0, 8), SplitAnswer::EndOfSplits);
}

#[test]
fn a_batch_applies_each_command_in_order_and_a_refusal_touches_no_other() {
    let mut s = State::default();
    let batch = Command::Batch(vec![
        Command::RegisterDataset { dataset_id: Some("a".into()), def: DatasetDef::range(3) },
        Command::GetOrCreateJob { dataset_id: "missing".into(), mode: Mode::Off, job_name: None },
        Command::GetOrCreateJob {
            dataset_id: "a".into(),
            mode: Mode::Off,
            job_name: Some("j".into()),
        },
        Command::Batch(vec![]),
    ]);
    let Response::Batch(results) = ok(&mut s, batch) else { panic!("a batch answers a batch") };
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], Ok(Response::DatasetRegistered { dataset_id: "a".into() }));
    assert!(matches!(results[1], Err(StateError::NotFound { .. })), "{:?}", results[1]);
    assert!(
        matches!(results[2], Ok(Response::Job { .. })),
        "the third saw the first: {:?}",
        results[2]
    );
    assert!(matches!(results[3], Err(StateError::InvalidArgument(_))), "batches do not nest");
    assert!(s.jobs_by_name.contains_key("j"));
}
