//! Pure tests of the replicated half of coordinated reads: no network, no clock.

use sluice_dataset::{Arg, DatasetDef};
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};

mod common;
use common::{iteration, off_job, ok, register, worker};

fn rr_job(s: &mut State, ds: &str, name: Option<&str>, n: u32) -> Result<u64, StateError> {
    off_job(s, ds, name, false, Some(n))
}

fn message(e: StateError) -> String {
    match e {
        StateError::InvalidArgument(m) => m,
        e => panic!("expected InvalidArgument, got {e:?}"),
    }
}

#[test]
fn a_coordinated_job_needs_an_infinite_dataset_and_names_the_count() {
    let mut s = State::default();
    let finite = register(&mut s, DatasetDef::range(10).map("square").batch(3, false));
    let before = s.clone();
    let m = message(rr_job(&mut s, &finite, Some("j"), 2).unwrap_err());
    assert!(m.contains("infinite dataset") && m.contains("repeat()"), "{m}");
    assert!(m.contains("ends after 4 element(s)"), "{m}");
    assert_eq!(s, before, "a refused command changes nothing");

    let forever = register(&mut s, DatasetDef::range(10).repeat_forever().batch(3, false));
    rr_job(&mut s, &forever, Some("j"), 2).unwrap();
    // Unknown cardinality is accepted, as tf.data does; the worker says if it ends.
    let unknown = register(&mut s, DatasetDef::range(10).filter_with("lt", vec![Arg::Int(5)]));
    rr_job(&mut s, &unknown, Some("k"), 2).unwrap();
}

#[test]
fn num_consumers_is_part_of_a_named_jobs_identity() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(10).repeat_forever());
    let job = rr_job(&mut s, &ds, Some("j"), 2).unwrap();
    assert_eq!(rr_job(&mut s, &ds, Some("j"), 2).unwrap(), job, "same parameters join");
    let m = message(rr_job(&mut s, &ds, Some("j"), 3).unwrap_err());
    assert!(m.contains("num_consumers=2") && m.contains("num_consumers=3"), "{m}");
    let plain = Command::GetOrCreateJob {
        dataset_id: ds.clone(),
        mode: Mode::Off,
        job_name: Some("j".into()),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        limits: Limits::default(),
    };
    let m = message(apply(&mut s, plain).unwrap_err());
    assert!(m.contains("num_consumers=2") && m.contains("num_consumers=None"), "{m}");
    let m = message(rr_job(&mut s, &ds, None, 2).unwrap_err());
    assert!(m.contains("job name"), "{m}");
}

#[test]
fn a_joining_worker_waits_pending_until_promoted_at_one_round_for_everyone() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(10).repeat_forever());
    worker(&mut s, "w1", 1);
    let job = rr_job(&mut s, &ds, Some("j"), 2).unwrap();
    let it = iteration(&mut s, job, 1).0;
    let first = s.iterations[&it].tasks.clone();
    assert_eq!(first.len(), 1);
    assert_eq!(s.tasks[&first[0]].starting_round, 0);

    // w2 joins: its task runs on the worker at once, but consumers do not see it.
    let w2 = worker(&mut s, "w2", 2);
    assert_eq!(w2.len(), 1, "the worker is told to run its task");
    assert_eq!(s.iterations[&it].tasks, first, "consumers do not read it yet");
    assert_eq!(s.iterations[&it].coordinated.as_ref().unwrap().pending, w2);

    let c = Command::CoordinatedPromoteTasks { iteration_id: it, starting_round: 17 };
    assert_eq!(ok(&mut s, c), Response::CoordinatedPromoted { task_ids: w2.clone() });
    assert_eq!(s.iterations[&it].tasks, [first.clone(), w2.clone()].concat());
    assert_eq!(s.tasks[&w2[0]].starting_round, 17);
    assert!(s.iterations[&it].coordinated.as_ref().unwrap().pending.is_empty());
    // Nothing pending: a second promotion promotes nothing.
    let c = Command::CoordinatedPromoteTasks { iteration_id: it, starting_round: 20 };
    assert_eq!(ok(&mut s, c), Response::CoordinatedPromoted { task_ids: vec![] });
}

#[test]
fn a_voted_out_task_is_dropped_by_its_worker_and_a_returning_worker_joins_again() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(10).repeat_forever());
    worker(&mut s, "w1", 1);
    worker(&mut s, "w2", 2);
    let job = rr_job(&mut s, &ds, Some("j"), 2).unwrap();
    let it = iteration(&mut s, job, 1).0;
    let tasks = s.iterations[&it].tasks.clone();
    let dead = tasks[1];
    ok(&mut s, Command::CoordinatedRemoveTask { task_id: dead, round: 5 });
    let rr = s.iterations[&it].coordinated.clone().unwrap();
    assert_eq!(rr.removed.get(&dead), Some(&5));
    assert!(!s.workers["w2"].active_tasks.contains(&dead), "the worker is told to drop it");
    assert_eq!(s.iterations[&it].tasks, tasks, "the read order keeps it, marked removed");

    // w2 comes back (new process): a fresh task, pending until promoted.
    let back = worker(&mut s, "w2", 3);
    assert_eq!(back.len(), 1);
    assert_ne!(back[0], dead);
    assert_eq!(s.iterations[&it].coordinated.as_ref().unwrap().pending, back);

    // Not a coordinated task: refused, nothing changes.
    let plain = register(&mut s, DatasetDef::range(3));
    let c = Command::GetOrCreateJob {
        dataset_id: plain,
        mode: Mode::Off,
        job_name: None,
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        limits: Limits::default(),
    };
    let Response::Job { job_id, .. } = ok(&mut s, c) else { panic!() };
    let plain_it = iteration(&mut s, job_id, 1).0;
    let plain_task = s.iterations[&plain_it].tasks[0];
    let before = s.clone();
    let e = apply(&mut s, Command::CoordinatedRemoveTask { task_id: plain_task, round: 0 });
    assert!(matches!(e, Err(StateError::FailedPrecondition(_))), "{e:?}");
    assert_eq!(s, before);
}
