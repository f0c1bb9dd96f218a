//! Pure tests of the state machine: no network, no clock.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::state::{SplitAnswer, SplitCursor};
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};

mod common;
use common::{finish, get_split, grant, iteration, job, job_with, ok, register, split, worker};

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
    // A user's numeric dataset ids do not move the automatic counter (issue 31:
    // an explicit id of 2^64-1 ended automatic ids for good): the next automatic
    // id skips the ids taken.
    let first = s.next_dataset_id;
    for id in [u64::MAX, u64::MAX - 1, first, first + 1] {
        let c = Command::RegisterDataset {
            dataset_id: Some(id.to_string()),
            def: DatasetDef::range(1),
            limits: Limits::default(),
        };
        ok(&mut s, c);
    }
    let c = Command::RegisterDataset {
        dataset_id: None,
        def: DatasetDef::range(3),
        limits: Limits::default(),
    };
    let next = (first + 2).to_string();
    assert_eq!(ok(&mut s, c), Response::DatasetRegistered { dataset_id: next });
    // Only 2^64 automatic registrations could reach the end; there, the last
    // ids taken, a registration is refused without changing anything.
    s.next_dataset_id = u64::MAX - 1;
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
