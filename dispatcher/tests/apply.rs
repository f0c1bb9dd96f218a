//! Pure tests of the state machine: no network, no clock.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::state::{SplitAnswer, SplitCursor};
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};

mod common;
use common::{iteration, ok, register, worker};

fn job(s: &mut State, ds: &str, mode: Mode, name: Option<&str>) -> Result<u64, StateError> {
    job_with(s, ds, mode, name, TargetWorkers::Auto, &[])
}

fn job_with(
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

fn split(s: &mut State, task: u64, uid: u64, seq: u64, rep: u64) -> SplitAnswer {
    grant(s, task, uid, seq, rep, 1)
}

/// The `GetSplit` of provider 0.
fn get_split(task: u64, uid: u64, seq: u64, rep: u64, max_splits: u32) -> Command {
    Command::GetSplit {
        task_id: task,
        worker_uid: uid,
        sequence: seq,
        provider: 0,
        repetition: rep,
        max_splits,
    }
}

fn grant(s: &mut State, task: u64, uid: u64, seq: u64, rep: u64, max_splits: u32) -> SplitAnswer {
    match ok(s, get_split(task, uid, seq, rep, max_splits)) {
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
    let c = Command::RegisterDataset {
        dataset_id: Some("mine".into()),
        def: DatasetDef::range(5),
        limits: Limits::default(),
    };
    assert_eq!(ok(&mut s, c.clone()), Response::DatasetRegistered { dataset_id: "mine".into() });
    assert_eq!(ok(&mut s, c), Response::DatasetRegistered { dataset_id: "mine".into() });
    let clash = Command::RegisterDataset {
        dataset_id: Some("mine".into()),
        def: DatasetDef::range(6),
        limits: Limits::default(),
    };
    let before = s.clone();
    assert!(matches!(apply(&mut s, clash), Err(StateError::AlreadyExists(_))));
    assert_eq!(s, before, "a refused command changes nothing");
    // A numeric explicit id pushes the automatic counter past it.
    let next: u64 = b.parse::<u64>().unwrap() + 1;
    let c = Command::RegisterDataset {
        dataset_id: Some(next.to_string()),
        def: DatasetDef::range(1),
        limits: Limits::default(),
    };
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
    let fin = Command::FinishTasks {
        worker_address: "w1:1".into(),
        worker_uid: 1,
        task_ids: vec![tasks[0], 999],
    };
    assert_eq!(ok(&mut s, fin), Response::TasksFinished { finished_iterations: vec![] });
    assert!(!s.iterations[&it].finished);
    let fin = Command::FinishTasks {
        worker_address: "w2:1".into(),
        worker_uid: 2,
        task_ids: vec![tasks[1]],
    };
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
    let c = get_split(t1, 1, 9, 0, 1);
    assert!(matches!(apply(&mut s, c), Err(StateError::FailedPrecondition(_))));
    assert_eq!(s, before);
    // A restarted worker (new uid) registers, starts its sequence again and gets
    // new splits only.
    worker(&mut s, "w1:1", 42);
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
    let c = get_split(t, 1, 0, 0, 1);
    assert!(matches!(apply(&mut s, c), Err(StateError::FailedPrecondition(_))));
}

#[test]
fn commands_and_state_round_trip_through_the_log_codec() {
    use sluice_dataset::Arg;
    let def = DatasetDef::range(10)
        .map_with("add", vec![Arg::Int(1), Arg::Float(0.5), Arg::Str("x".into())])
        .filter("identity")
        .shuffle(4, 2)
        .repeat_forever();
    let cmd =
        Command::RegisterDataset { dataset_id: Some("d".into()), def, limits: Limits::default() };
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
        Command::RegisterDataset {
            dataset_id: Some("a".into()),
            def: DatasetDef::range(3),
            limits: Limits::default(),
        },
        Command::GetOrCreateJob {
            dataset_id: "missing".into(),
            mode: Mode::Off,
            job_name: None,
            target_workers: TargetWorkers::Auto,
            static_workers: vec![],
            cross_trainer_cache: false,
            num_consumers: None,
            limits: Limits::default(),
        },
        Command::GetOrCreateJob {
            dataset_id: "a".into(),
            mode: Mode::Off,
            job_name: Some("j".into()),
            target_workers: TargetWorkers::Any,
            static_workers: vec![],
            cross_trainer_cache: false,
            num_consumers: None,
            limits: Limits::default(),
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

fn text_files(n: usize) -> DatasetDef {
    DatasetDef::text_lines((0..n).map(|f| format!("/data/f{f}.txt")).collect())
}

fn finish(s: &mut State, address: &str, task_ids: Vec<u64>) -> Vec<u64> {
    let worker_uid = s.workers[address].worker_uid;
    let c = Command::FinishTasks { worker_address: address.into(), worker_uid, task_ids };
    match ok(s, c) {
        Response::TasksFinished { finished_iterations } => finished_iterations,
        r => panic!("{r:?}"),
    }
}

#[test]
fn a_static_iteration_has_one_task_per_listed_worker_with_its_index_and_waits_for_all_shards() {
    let mut s = State::default();
    let list = ["w0:1", "w1:1", "w2:1"];
    worker(&mut s, "w1:1", 1);
    worker(&mut s, "other:1", 9);
    let ds = register(&mut s, text_files(6));
    let j = job_with(&mut s, &ds, Mode::File, Some("f"), TargetWorkers::Any, &list).unwrap();
    assert_eq!(s.jobs[&j].static_workers, list.map(String::from).to_vec());
    let (it, _) = iteration(&mut s, j, 1);
    // Only the registered listed worker has a task so far, reading shard 1.
    let tasks: Vec<_> = s.iterations[&it].tasks.iter().map(|t| s.tasks[t].clone()).collect();
    assert_eq!(tasks.len(), 1);
    assert_eq!((tasks[0].worker_address.as_str(), tasks[0].worker_index), ("w1:1", 1));
    assert_eq!(finish(&mut s, "w1:1", vec![tasks[0].id]), Vec::<u64>::new(), "shards 0, 2 owed");
    // Listed workers registering later get their own shard; an unlisted one gets none.
    let t2 = worker(&mut s, "w2:1", 2);
    let t0 = worker(&mut s, "w0:1", 3);
    assert_eq!(worker(&mut s, "late:1", 4), Vec::<u64>::new());
    assert_eq!((s.tasks[&t0[0]].worker_index, s.tasks[&t2[0]].worker_index), (0, 2));
    assert_eq!(finish(&mut s, "w2:1", t2), Vec::<u64>::new());
    assert_eq!(finish(&mut s, "w0:1", t0), vec![it], "all three shards finished");
    // The list stays the job's own: a job created later with another list keeps its own.
    let j2 = job_with(&mut s, &ds, Mode::Data, None, TargetWorkers::Any, &list[..2]).unwrap();
    assert_eq!(s.jobs[&j2].static_workers.len(), 2);
    // OFF and DYNAMIC jobs keep no list.
    let j3 = job_with(&mut s, &ds, Mode::Off, None, TargetWorkers::Any, &list).unwrap();
    assert!(s.jobs[&j3].static_workers.is_empty());
}

#[test]
fn job_creation_refuses_what_the_mode_cannot_shard_naming_the_numbers() {
    let mut s = State::default();
    let five = ["a:1", "b:1", "c:1", "d:1", "e:1"];
    let files = register(&mut s, text_files(3));
    let range = register(&mut s, DatasetDef::range(10));
    let hinted = register(
        &mut s,
        DatasetDef::range(20).shard(sluice_dataset::ShardArg::Hint, sluice_dataset::ShardArg::Hint),
    );
    let zipped = register(&mut s, DatasetDef::range(3).zip(vec![DatasetDef::range(3)]));
    let before = s.clone();
    let err = |s: &mut State, ds: &str, mode: Mode, workers: &[&str]| {
        job_with(s, ds, mode, None, TargetWorkers::Auto, workers).unwrap_err()
    };

    let e = err(&mut s, &files, Mode::File, &five);
    assert!(matches!(e, StateError::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("3 file(s)") && e.to_string().contains("5 workers"), "{e}");
    let e = err(&mut s, &range, Mode::File, &five).to_string();
    assert!(e.contains("reads no files") && e.contains("range"), "{e}");
    let e = err(&mut s, &range, Mode::Data, &[]);
    assert!(matches!(e, StateError::FailedPrecondition(_)), "{e:?}");
    assert!(e.to_string().contains("--worker-addresses"), "{e}");
    for mode in [Mode::Off, Mode::Dynamic, Mode::Data] {
        let e = err(&mut s, &hinted, mode, &five);
        assert!(matches!(e, StateError::FailedPrecondition(_)), "{mode:?}: {e:?}");
        assert!(e.to_string().contains("SHARD_HINT") && e.to_string().contains("HINT"), "{e}");
    }
    let e = err(&mut s, &zipped, Mode::Dynamic, &[]).to_string();
    assert!(e.contains("`zip`") && e.contains("DYNAMIC"), "{e}");
    let e = err(&mut s, &range, Mode::Hint, &five).to_string();
    assert!(e.contains("SHARD_HINT") && e.contains("has none"), "{e}");
    assert_eq!(s, before, "refused jobs change nothing");

    // What the modes can divide is accepted.
    job_with(&mut s, &files, Mode::File, None, TargetWorkers::Auto, &five[..3]).unwrap();
    job_with(&mut s, &files, Mode::FileOrData, None, TargetWorkers::Auto, &five).unwrap();
    job_with(&mut s, &range, Mode::Data, None, TargetWorkers::Auto, &five).unwrap();
    job_with(&mut s, &hinted, Mode::Hint, None, TargetWorkers::Auto, &five[..2]).unwrap();
    job_with(&mut s, &files, Mode::Dynamic, None, TargetWorkers::Auto, &[]).unwrap();
}

#[test]
fn target_workers_is_part_of_a_named_jobs_identity() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(3));
    let j = job_with(&mut s, &ds, Mode::Off, Some("t"), TargetWorkers::Local, &[]).unwrap();
    assert_eq!(job_with(&mut s, &ds, Mode::Off, Some("t"), TargetWorkers::Local, &[]), Ok(j));
    let e = job_with(&mut s, &ds, Mode::Off, Some("t"), TargetWorkers::Any, &[]).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("target_workers=LOCAL") && e.contains("target_workers=ANY"), "{e}");
}

/// Counters a client or worker can push to their limit are refused at it, with
/// the state unchanged, instead of wrapping or panicking (a panic in `apply`
/// would stop every replica at the same entry).
#[test]
fn values_at_their_limit_are_refused_without_changing_state() {
    let mut s = State::default();
    // A user's numeric dataset id of u64::MAX leaves no automatic id after it.
    let c = Command::RegisterDataset {
        dataset_id: Some(u64::MAX.to_string()),
        def: DatasetDef::range(1),
        limits: Limits::default(),
    };
    ok(&mut s, c);
    let c = Command::RegisterDataset {
        dataset_id: Some((u64::MAX - 1).to_string()),
        def: DatasetDef::range(1),
        limits: Limits::default(),
    };
    ok(&mut s, c);
    let before = s.clone();
    let c = Command::RegisterDataset {
        dataset_id: None,
        def: DatasetDef::range(2),
        limits: Limits::default(),
    };
    match apply(&mut s, c) {
        Err(StateError::FailedPrecondition(m)) => {
            assert!(m.contains("no automatic dataset id"), "{m}")
        }
        r => panic!("expected a refusal, got {r:?}"),
    }
    assert_eq!(s, before);

    // A worker's split sequence at u64::MAX, then the next request.
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let ds = register(&mut s, DatasetDef::range(5));
    let j = job(&mut s, &ds, Mode::Dynamic, None).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    let t = s.iterations[&it].tasks[0];
    assert_eq!(split(&mut s, t, 1, u64::MAX, 0), SplitAnswer::Split { begin: 0, end: 1 });
    let before = s.clone();
    let c = Command::GetSplit {
        task_id: t,
        worker_uid: 1,
        sequence: 0,
        provider: 0,
        repetition: 0,
        max_splits: 1,
    };
    assert!(matches!(apply(&mut s, c), Err(StateError::FailedPrecondition(_))));
    assert_eq!(s, before);

    // A repetition of u64::MAX would move the cursor past it when the epoch closes.
    match apply(&mut s, get_split(t, 2, 0, u64::MAX, 1)) {
        Err(StateError::InvalidArgument(m)) => assert!(m.contains("out of range"), "{m}"),
        r => panic!("expected a refusal, got {r:?}"),
    }
    assert_eq!(s, before);
}

#[test]
fn only_the_registered_incarnation_of_a_worker_takes_splits_and_reports_tasks() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let ds = register(&mut s, DatasetDef::range(10));
    let j = job(&mut s, &ds, Mode::Dynamic, None).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    let task = s.iterations[&it].tasks[0];
    assert_eq!(split(&mut s, task, 1, 0, 0), SplitAnswer::Split { begin: 0, end: 1 });
    // The worker restarts: the process with uid 2 is now the registered one.
    worker(&mut s, "w1:1", 2);
    let before = s.clone();
    let stale_split = get_split(task, 1, 1, 0, 1);
    let forged_split = get_split(task, 7, 0, 0, 1);
    let stale_finish =
        Command::FinishTasks { worker_address: "w1:1".into(), worker_uid: 1, task_ids: vec![task] };
    for (cmd, uid) in [(stale_split, 1), (forged_split, 7), (stale_finish, 1)] {
        let name = cmd.name();
        let err = apply(&mut s, cmd).unwrap_err();
        assert!(matches!(err, StateError::FailedPrecondition(_)), "{name}: {err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("registered with worker_uid 2")
                && msg.contains(&format!("carries worker_uid {uid}")),
            "{name}: {msg}"
        );
        assert_eq!(s, before, "{name} from another incarnation changed the state");
    }
    // The registered incarnation is answered (the old one's range was lost).
    assert_eq!(split(&mut s, task, 2, 0, 0), SplitAnswer::Split { begin: 1, end: 2 });
    assert_eq!(finish(&mut s, "w1:1", vec![task]), vec![it]);
}

/// Applies `c`, which must be refused at a cap naming `flag`, changing nothing.
fn refused_at_cap(s: &mut State, c: Command, flag: &str) {
    let before = s.clone();
    let name = c.name();
    match apply(s, c) {
        Err(StateError::ResourceExhausted(m)) => assert!(m.contains(flag), "{name}: {m}"),
        r => panic!("{name}: expected a refusal at {flag}, got {r:?}"),
    }
    assert_eq!(*s, before, "{name} refused at {flag} changed the state");
}

#[test]
fn each_cap_refuses_with_resource_exhausted_naming_its_flag_and_changes_nothing() {
    let one = Limits {
        max_datasets: 1,
        max_jobs: 1,
        max_iterations: 1,
        max_clients: 2,
        max_tasks_per_worker: 1,
        max_num_consumers: 2,
    };
    let mut s = State::default();
    let dataset = |id: &str| Command::RegisterDataset {
        dataset_id: Some(id.into()),
        def: DatasetDef::range(5).repeat_forever(),
        limits: one,
    };
    ok(&mut s, dataset("a"));
    refused_at_cap(&mut s, dataset("b"), "--max-datasets 1");
    ok(&mut s, dataset("a")); // the same registration again is no new dataset
    let job = |name: Option<&str>, num_consumers| Command::GetOrCreateJob {
        dataset_id: "a".into(),
        mode: Mode::Off,
        job_name: name.map(String::from),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers,
        limits: one,
    };
    ok(&mut s, job(Some("j"), None));
    refused_at_cap(&mut s, job(None, None), "--max-jobs 1");
    ok(&mut s, job(Some("j"), None)); // joining the job is no new job
    refused_at_cap(&mut s, job(Some("k"), Some(3)), "--max-num-consumers 2");
    let j = s.jobs_by_name["j"];
    worker(&mut s, "w1:1", 1);
    let iteration = |repetition, limits| Command::GetOrCreateIteration {
        job_id: j,
        repetition,
        elements_per_split: 1,
        limits,
    };
    ok(&mut s, iteration(0, one));
    refused_at_cap(&mut s, iteration(1, one), "--max-iterations 1");
    ok(&mut s, iteration(0, one)); // a second consumer of the same iteration
    refused_at_cap(&mut s, iteration(0, one), "--max-clients 2");
    // w1 runs its one task: a new iteration (room for it) is refused for it.
    let roomy = Limits { max_iterations: 10, max_clients: 10, ..one };
    refused_at_cap(&mut s, iteration(1, roomy), "--max-tasks-per-worker 1");
    let err = apply(&mut s, iteration(1, roomy)).unwrap_err().to_string();
    assert!(err.contains("worker w1:1 runs 1 unfinished tasks"), "{err}");
}

#[test]
fn a_worker_registering_during_more_iterations_than_its_cap_gets_tasks_up_to_it() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(5));
    let its: Vec<u64> = (0..3)
        .map(|_| {
            let j = job(&mut s, &ds, Mode::Off, None).unwrap();
            iteration(&mut s, j, 1).0
        })
        .collect();
    let limits = Limits { max_tasks_per_worker: 2, ..Limits::default() };
    let c = Command::RegisterWorker {
        address: "w1:1".into(),
        worker_uid: 1,
        functions: vec![],
        limits,
    };
    let Response::WorkerRegistered { tasks } = ok(&mut s, c) else { panic!() };
    assert_eq!(tasks.len(), 2);
    let with_task: Vec<u64> = tasks.iter().map(|t| s.tasks[t].iteration_id).collect();
    assert_eq!(with_task, its[..2], "the oldest iterations first");
}

/// Entries the state holds (what a snapshot carries, besides the counters).
fn entries(s: &State) -> usize {
    s.jobs.len() + s.jobs_by_name.len() + s.iterations.len() + s.tasks.len() + s.clients.len()
}

#[test]
fn a_finished_iteration_without_consumers_is_forgotten_with_its_tasks_and_last_job() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    worker(&mut s, "w2:1", 2);
    let ds = register(&mut s, DatasetDef::range(4));
    let j = job(&mut s, &ds, Mode::Dynamic, Some("train")).unwrap();
    let held_before = entries(&s);
    let (it, client) = iteration(&mut s, j, 1);
    let tasks = s.iterations[&it].tasks.clone();
    split(&mut s, tasks[0], 1, 0, 0);
    let forget = Command::ForgetIteration { iteration_id: it };
    let kept = Response::IterationForgotten { changed: false, job_forgotten: false };
    // Live: kept.
    assert_eq!(ok(&mut s, forget.clone()), kept);
    finish(&mut s, "w1:1", vec![tasks[0]]);
    finish(&mut s, "w2:1", vec![tasks[1]]);
    assert!(s.iterations[&it].finished);
    // Finished, but a consumer still reads it: kept.
    assert_eq!(ok(&mut s, forget.clone()), kept);
    ok(&mut s, Command::ReleaseClient { client_id: client });
    let held = entries(&s);
    let r = ok(&mut s, forget.clone());
    assert_eq!(r, Response::IterationForgotten { changed: true, job_forgotten: true });
    assert!(entries(&s) < held, "{} entries after, {held} before", entries(&s));
    assert_eq!(entries(&s), held_before - 2, "the job and its name went too");
    assert!(!s.tasks.contains_key(&tasks[0]) && !s.jobs.contains_key(&j));
    assert_eq!(ok(&mut s, forget), kept, "forgetting again changes nothing");
    // A reader of the forgotten job is told, and the name makes a new job.
    let again = Command::GetOrCreateIteration {
        job_id: j,
        repetition: 0,
        elements_per_split: 1,
        limits: Limits::default(),
    };
    let err = apply(&mut s, again).unwrap_err().to_string();
    assert!(
        err.contains(&format!("job `{j}` not found")) && err.contains("--finished-job-ttl-secs")
    );
    let j2 = job(&mut s, &ds, Mode::Dynamic, Some("train")).unwrap();
    assert!(j2 > j, "ids are never reused");
    // The forgotten tasks' split ranges are not handed out again to a new
    // iteration's stale request: the task is unknown.
    let err = apply(&mut s, get_split(tasks[0], 1, 1, 0, 1)).unwrap_err();
    assert!(matches!(err, StateError::NotFound { .. }), "{err:?}");
}
