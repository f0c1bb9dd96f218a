//! Pure tests of liveness and GC in the state machine (`WorkerLost`,
//! `GcIteration`, a restart's lost splits): no network, no clock.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::state::{LostSplit, SplitAnswer};
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, TargetWorkers};

mod common;
use common::{iteration, ok, worker};

/// A dataset of `n` elements and a named job over it in `mode`.
fn job(s: &mut State, n: u64, mode: Mode) -> u64 {
    let dataset_id = match ok(
        s,
        Command::RegisterDataset { dataset_id: None, def: range(n), limits: Limits::default() },
    ) {
        Response::DatasetRegistered { dataset_id } => dataset_id,
        r => panic!("{r:?}"),
    };
    let c = Command::GetOrCreateJob {
        dataset_id,
        mode,
        job_name: Some("j".into()),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        limits: Limits::default(),
    };
    match ok(s, c) {
        Response::Job { job_id, .. } => job_id,
        r => panic!("{r:?}"),
    }
}

fn range(n: u64) -> DatasetDef {
    DatasetDef::range(n as i64)
}

fn split(s: &mut State, task: u64, uid: u64, seq: u64) -> SplitAnswer {
    let c = Command::GetSplit {
        task_id: task,
        worker_uid: uid,
        sequence: seq,
        provider: 0,
        repetition: 0,
        max_splits: 1,
    };
    match ok(s, c) {
        Response::Split(a) => a,
        r => panic!("{r:?}"),
    }
}

fn lost(s: &mut State, addr: &str, uid: u64) -> bool {
    match ok(s, Command::WorkerLost { address: addr.into(), worker_uid: uid }) {
        Response::WorkerLost { changed } => changed,
        r => panic!("{r:?}"),
    }
}

fn gc(s: &mut State, iteration_id: u64) -> bool {
    match ok(s, Command::GcIteration { iteration_id }) {
        Response::IterationCollected { changed } => changed,
        r => panic!("{r:?}"),
    }
}

fn finish(s: &mut State, addr: &str, task_ids: Vec<u64>) {
    let worker_uid = s.workers[addr].worker_uid;
    ok(s, Command::FinishTasks { worker_address: addr.into(), worker_uid, task_ids });
}

#[test]
fn a_lost_worker_ends_its_tasks_records_its_last_split_and_lets_the_iteration_finish() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 11);
    worker(&mut s, "w2:1", 22);
    let j = job(&mut s, 100, Mode::Dynamic);
    let (it, _) = iteration(&mut s, j, 10);
    let tasks = s.iterations[&it].tasks.clone();
    let (t1, t2) = (tasks[0], tasks[1]);
    assert_eq!(split(&mut s, t1, 11, 0), SplitAnswer::Split { begin: 0, end: 10 });
    assert_eq!(split(&mut s, t2, 22, 0), SplitAnswer::Split { begin: 10, end: 20 });
    assert_eq!(split(&mut s, t1, 11, 1), SplitAnswer::Split { begin: 20, end: 30 });

    assert!(lost(&mut s, "w1:1", 11));
    let iteration = &s.iterations[&it];
    // Only the last range granted to the task is counted: the earlier one went
    // through the pipeline before the next was asked for.
    assert_eq!(iteration.lost_splits, vec![LostSplit { task_id: t1, begin: 20, end: 30 }]);
    assert_eq!((iteration.lost_split_count(), iteration.lost_elements()), (1, 10));
    assert!(iteration.lost_tasks.contains(&t1) && s.tasks[&t1].finished && s.tasks[&t1].lost);
    assert!(s.workers["w1:1"].lost && s.workers["w1:1"].active_tasks.is_empty());
    assert!(!iteration.finished, "the other worker's task still runs");

    // The lost task takes nothing more, not even a replay of its lost range.
    let cursor = s.iterations[&it].cursors[0];
    assert_eq!(split(&mut s, t1, 11, 1), SplitAnswer::EndOfSplits);
    assert_eq!(split(&mut s, t1, 11, 2), SplitAnswer::EndOfSplits);
    assert_eq!(s.iterations[&it].cursors[0], cursor);

    // The survivor takes the rest; then the iteration finishes.
    assert_eq!(split(&mut s, t2, 22, 1), SplitAnswer::Split { begin: 30, end: 40 });
    finish(&mut s, "w2:1", vec![t2]);
    assert!(s.iterations[&it].finished);
}

#[test]
fn worker_lost_is_idempotent_and_spares_a_worker_that_registered_again_as_a_new_process() {
    let mut s = State::default();
    worker(&mut s, "w:1", 1);
    let j = job(&mut s, 10, Mode::Off);
    let (it, _) = iteration(&mut s, j, 1);

    // A late timer proposal for the previous process does nothing to the new one.
    worker(&mut s, "w:1", 2);
    let before = s.clone();
    assert!(!lost(&mut s, "w:1", 1));
    assert!(!lost(&mut s, "nobody:1", 2));
    assert_eq!(s, before);

    assert!(lost(&mut s, "w:1", 2));
    let after = s.clone();
    assert!(!lost(&mut s, "w:1", 2), "the same fact twice");
    assert_eq!(s, after);
    // Its only task ended: an OFF iteration of one lost worker finishes, recorded.
    assert!(s.iterations[&it].finished);
    assert_eq!(s.iterations[&it].lost_tasks.len(), 1);
    assert!(s.iterations[&it].lost_splits.is_empty(), "OFF has no splits");
}

#[test]
fn a_lost_worker_that_registers_again_gets_a_fresh_task_in_each_unfinished_iteration() {
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    worker(&mut s, "w2:1", 2);
    let j = job(&mut s, 10, Mode::Off);
    let (it, _) = iteration(&mut s, j, 1);
    let old = s.iterations[&it].tasks[0];
    assert!(lost(&mut s, "w1:1", 1));
    assert!(!s.iterations[&it].finished, "w2's copy is still owed");

    // Back (same uid, as after a NotFound heartbeat): a new task for the whole copy.
    let tasks = worker(&mut s, "w1:1", 1);
    assert_eq!(tasks.len(), 1);
    assert_ne!(tasks[0], old);
    assert!(!s.workers["w1:1"].lost);
    assert_eq!(s.iterations[&it].tasks.len(), 3);
    // Registering again changes nothing more.
    assert_eq!(worker(&mut s, "w1:1", 1), tasks);
}

#[test]
fn a_new_iteration_puts_no_task_on_a_lost_worker_which_gets_one_when_it_returns() {
    // Issue 31, defect 1: every job created after a worker was lost had a task
    // on it that nothing ever ended, so every reader waited on it and failed.
    for mode in [Mode::Dynamic, Mode::Off] {
        let mut s = State::default();
        worker(&mut s, "w1:1", 1);
        worker(&mut s, "w2:1", 2);
        assert!(lost(&mut s, "w2:1", 2));
        let ds = common::register(&mut s, range(10));
        let j = common::job(&mut s, &ds, mode, None).unwrap();
        let (it, _) = iteration(&mut s, j, 10);
        let on: Vec<&str> =
            s.iterations[&it].tasks.iter().map(|t| s.tasks[t].worker_address.as_str()).collect();
        assert_eq!(on, ["w1:1"], "{mode:?}: only the live worker takes part");
        assert!(s.workers["w2:1"].active_tasks.is_empty());

        // Back as a new process: it joins the running iteration.
        let tasks = worker(&mut s, "w2:1", 3);
        assert_eq!(tasks.len(), 1, "{mode:?}");
        assert_eq!(s.iterations[&it].tasks.len(), 2);
    }
}

#[test]
fn a_lost_dynamic_task_that_never_held_an_element_costs_its_readers_nothing() {
    // Issue 31, defect 1: a worker lost after the splits ran out failed a read
    // that had every element ("the read lost data").
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    worker(&mut s, "w2:1", 2);
    worker(&mut s, "w3:1", 3);
    let j = job(&mut s, 10, Mode::Dynamic);
    let (it, _) = iteration(&mut s, j, 10);
    let tasks = s.iterations[&it].tasks.clone();
    let (t1, t2, t3) = (tasks[0], tasks[1], tasks[2]);
    assert_eq!(split(&mut s, t1, 1, 0), SplitAnswer::Split { begin: 0, end: 10 });
    assert_eq!(split(&mut s, t2, 2, 0), SplitAnswer::EndOfSplits, "w2 came too late");
    // w3 never asked.
    assert!(lost(&mut s, "w2:1", 2));
    assert!(lost(&mut s, "w3:1", 3));
    for t in [t2, t3] {
        assert!(s.tasks[&t].lost, "the state still records the task as lost");
        assert!(!s.lost_task_held_elements(&s.tasks[&t]), "task {t} held nothing");
    }
    // w1, lost holding its range, cost its readers that range.
    assert!(lost(&mut s, "w1:1", 1));
    assert!(s.lost_task_held_elements(&s.tasks[&t1]));
}

#[test]
fn a_lost_dynamic_task_that_read_splits_before_its_end_may_have_held_elements() {
    // Its last answer was end of splits, but elements of its earlier splits may
    // still have been in its buffer: a reader that missed its end is told.
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let j = job(&mut s, 10, Mode::Dynamic);
    let (it, _) = iteration(&mut s, j, 10);
    let t = s.iterations[&it].tasks[0];
    assert_eq!(split(&mut s, t, 1, 0), SplitAnswer::Split { begin: 0, end: 10 });
    assert_eq!(split(&mut s, t, 1, 1), SplitAnswer::EndOfSplits);
    assert!(lost(&mut s, "w1:1", 1));
    assert!(s.lost_task_held_elements(&s.tasks[&t]));
    // OFF: a lost task is always an incomplete copy.
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let j = job(&mut s, 10, Mode::Off);
    let (it, _) = iteration(&mut s, j, 10);
    let t = s.iterations[&it].tasks[0];
    assert!(lost(&mut s, "w1:1", 1));
    assert!(s.lost_task_held_elements(&s.tasks[&t]));
}

#[test]
fn a_restarted_worker_s_last_ranges_are_recorded_lost_once() {
    let mut s = State::default();
    worker(&mut s, "w:1", 1);
    let j = job(&mut s, 100, Mode::Dynamic);
    let (it, _) = iteration(&mut s, j, 5);
    let t = s.iterations[&it].tasks[0];
    split(&mut s, t, 1, 0);
    worker(&mut s, "w:1", 2);
    assert_eq!(s.iterations[&it].lost_splits, vec![LostSplit { task_id: t, begin: 0, end: 5 }]);
    worker(&mut s, "w:1", 2);
    assert_eq!(s.iterations[&it].lost_splits.len(), 1, "re-registering adds nothing");
    // The new process continues from the cursor.
    assert_eq!(split(&mut s, t, 2, 0), SplitAnswer::Split { begin: 5, end: 10 });
}

#[test]
fn gc_collects_only_an_iteration_without_consumers_and_a_new_reader_gets_a_new_iteration() {
    let mut s = State::default();
    worker(&mut s, "w:1", 1);
    let j = job(&mut s, 10, Mode::Off);
    let (it, client) = iteration(&mut s, j, 1);
    let task = s.iterations[&it].tasks[0];

    let before = s.clone();
    assert!(!gc(&mut s, it), "a consumer joined since the timer looked");
    assert_eq!(s, before);

    ok(&mut s, Command::ReleaseClient { client_id: client });
    assert!(gc(&mut s, it));
    assert!(s.iterations[&it].garbage_collected && !s.iterations[&it].finished);
    assert!(s.tasks[&task].finished, "ended, so the worker is told to delete it");
    assert!(s.workers["w:1"].active_tasks.is_empty());
    let after = s.clone();
    assert!(!gc(&mut s, it), "the same fact twice");
    assert_eq!(s, after);

    // Nothing resurrects: registering again gives the worker no task in it.
    assert!(worker(&mut s, "w:1", 2).is_empty());
    // A new reader of the same (job, repetition) gets a new iteration (tf.data).
    let (it2, _) = iteration(&mut s, j, 1);
    assert_ne!(it2, it);
    assert_eq!(s.jobs[&j].iterations[&0], it2);
    assert!(!s.iterations[&it2].garbage_collected);
    assert_eq!(s.workers["w:1"].active_tasks.len(), 1);
}

#[test]
fn a_finished_iteration_is_never_collected_and_an_unknown_one_is_not_found() {
    let mut s = State::default();
    worker(&mut s, "w:1", 1);
    let j = job(&mut s, 10, Mode::Off);
    let (it, client) = iteration(&mut s, j, 1);
    let task = s.iterations[&it].tasks[0];
    finish(&mut s, "w:1", vec![task]);
    ok(&mut s, Command::ReleaseClient { client_id: client });
    assert!(!gc(&mut s, it));
    assert!(!s.iterations[&it].garbage_collected);
    assert!(apply(&mut s, Command::GcIteration { iteration_id: 77 }).is_err());
}

#[test]
fn liveness_commands_replay_to_the_same_state_and_survive_the_log_codec() {
    let cmds = || {
        vec![
            Command::RegisterWorker {
                address: "w:1".into(),
                worker_uid: 1,
                functions: vec![],
                python_version: None,
                limits: Limits::default(),
            },
            Command::RegisterDataset {
                dataset_id: None,
                def: range(20),
                limits: Limits::default(),
            },
            Command::GetOrCreateJob {
                dataset_id: "1000".into(),
                mode: Mode::Dynamic,
                job_name: None,
                target_workers: TargetWorkers::Auto,
                static_workers: vec![],
                cross_trainer_cache: false,
                num_consumers: None,
                limits: Limits::default(),
            },
            Command::GetOrCreateIteration {
                job_id: 5000,
                repetition: 0,
                elements_per_split: 2,
                limits: Limits::default(),
            },
            Command::GetSplit {
                task_id: 4000,
                worker_uid: 1,
                sequence: 0,
                provider: 0,
                repetition: 0,
                max_splits: 1,
            },
            Command::WorkerLost { address: "w:1".into(), worker_uid: 1 },
            Command::ReleaseClient { client_id: 3000 },
            Command::GcIteration { iteration_id: 2000 },
        ]
    };
    let run = || {
        let mut s = State::default();
        for c in cmds() {
            let _ = apply(&mut s, c);
        }
        s
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert_eq!(a.iterations[&2000].lost_elements(), 2);
    let bytes = bincode::serialize(&a).unwrap();
    assert_eq!(bincode::deserialize::<State>(&bytes).unwrap(), a);
    for c in cmds() {
        let bytes = bincode::serialize(&c).unwrap();
        assert_eq!(bincode::deserialize::<Command>(&bytes).unwrap(), c);
    }
}
