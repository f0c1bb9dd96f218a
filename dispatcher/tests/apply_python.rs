//! Pure tests of capabilities: a job whose pipeline has Python stages gets tasks
//! only on workers whose registered Python can run it, wherever tasks are made
//! (a new iteration, a worker registering into running ones, a static job's
//! shard list, a coordinated iteration's joining tasks).

use sluice_dataset::python::{Pickled, PyFunction, PyOp, PythonStage};
use sluice_dataset::{DatasetDef, Stage};
use sluice_dispatcher::{apply, Command, Limits, Mode, State, StateError, TargetWorkers};

mod common;
use common::{iteration, job, job_with, off_job, python_worker, register, worker};

fn pickled(version: &str) -> Stage {
    let f = PyFunction::Pickle(Pickled { name: "<lambda>".into(), data: vec![1, 2, 3] });
    Stage::Python(PythonStage::new(PyOp::Map, f, version))
}

fn by_reference() -> Stage {
    Stage::Python(PythonStage::new(PyOp::Map, PyFunction::Ref("mypkg.aug:flip".into()), "3.12"))
}

fn with(mut def: DatasetDef, stage: Stage) -> DatasetDef {
    def.stages.push(stage);
    def
}

/// The workers the tasks of `iteration_id` run on (joining ones included).
fn task_workers(s: &State, iteration_id: u64) -> Vec<String> {
    let it = &s.iterations[&iteration_id];
    let pending = it.coordinated.iter().flat_map(|c| c.pending.iter());
    it.tasks.iter().chain(pending).map(|t| s.tasks[t].worker_address.clone()).collect()
}

#[test]
fn a_worker_without_python_gets_no_task_of_a_python_job_and_tasks_of_plain_jobs() {
    let mut s = State::default();
    worker(&mut s, "plain:1", 1);
    python_worker(&mut s, "py:1", 2, Some("3.11.7"));
    let python = register(&mut s, with(DatasetDef::range(10), pickled("3.11.2")));
    let plain = register(&mut s, DatasetDef::range(10));
    for mode in [Mode::Off, Mode::Dynamic] {
        let j = job(&mut s, &python, mode, None).unwrap();
        let (it, _) = iteration(&mut s, j, 1);
        assert_eq!(task_workers(&s, it), ["py:1"], "{mode:?}");
        let j = job(&mut s, &plain, mode, None).unwrap();
        let (it, _) = iteration(&mut s, j, 1);
        assert_eq!(task_workers(&s, it), ["plain:1", "py:1"], "{mode:?}");
    }
    assert_eq!(s.workers["py:1"].python_version.as_deref(), Some("3.11.7"));
    assert_eq!(s.workers["plain:1"].python_version, None);
}

#[test]
fn a_pickle_goes_only_to_its_python_minor_version_and_a_reference_to_any_python() {
    let mut s = State::default();
    python_worker(&mut s, "py311:1", 1, Some("3.11.7"));
    python_worker(&mut s, "py312:1", 2, Some("3.12.1"));
    worker(&mut s, "plain:1", 3);
    let pickle = register(&mut s, with(DatasetDef::range(10), pickled("3.12.0")));
    let reference = register(&mut s, with(DatasetDef::range(10), by_reference()));
    let j = job(&mut s, &pickle, Mode::Off, None).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    assert_eq!(task_workers(&s, it), ["py312:1"]);
    let j = job(&mut s, &reference, Mode::Off, None).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    assert_eq!(task_workers(&s, it), ["py311:1", "py312:1"]);
}

#[test]
fn a_worker_registering_later_with_the_right_python_gets_the_task() {
    let mut s = State::default();
    worker(&mut s, "plain:1", 1);
    python_worker(&mut s, "old:1", 2, Some("3.10.4"));
    let ds = register(&mut s, with(DatasetDef::range(10), pickled("3.11.7")));
    let j = job(&mut s, &ds, Mode::Dynamic, Some("train")).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    assert!(task_workers(&s, it).is_empty(), "no registered worker can run it");
    // Registering again unchanged gives nothing; with the right Python, a task.
    assert!(worker(&mut s, "plain:1", 1).is_empty());
    assert!(python_worker(&mut s, "late:1", 3, Some("3.13.0")).is_empty());
    let tasks = python_worker(&mut s, "late:2", 4, Some("3.11.2"));
    assert_eq!(tasks.len(), 1);
    assert_eq!(task_workers(&s, it), ["late:2"]);
    // A worker restarted with --allow-python (same address, new uid) joins too.
    let tasks = python_worker(&mut s, "plain:1", 5, Some("3.11.7"));
    assert_eq!(tasks.len(), 1);
    assert_eq!(task_workers(&s, it), ["late:2", "plain:1"]);
}

#[test]
fn a_static_job_over_python_stages_shards_among_the_listed_workers_that_can_run_them() {
    let mut s = State::default();
    worker(&mut s, "a:1", 1);
    python_worker(&mut s, "b:1", 2, Some("3.11.7"));
    python_worker(&mut s, "c:1", 3, Some("3.11.1"));
    let ds = register(&mut s, with(DatasetDef::range(10), pickled("3.11.7")));
    let list = ["a:1", "b:1", "unregistered:1", "c:1"];
    let j = job_with(&mut s, &ds, Mode::Data, None, TargetWorkers::Any, &list).unwrap();
    assert_eq!(s.jobs[&j].static_workers, ["b:1", "c:1"], "shards among those that can run it");
    let (it, _) = iteration(&mut s, j, 1);
    assert_eq!(task_workers(&s, it), ["b:1", "c:1"]);
    let shards: Vec<u32> =
        s.iterations[&it].tasks.iter().map(|t| s.tasks[t].worker_index).collect();
    assert_eq!(shards, [0, 1]);
    // The listed worker that registers later with Python is not in this job's list.
    assert!(python_worker(&mut s, "unregistered:1", 4, Some("3.11.7")).is_empty());
    // A shard's worker lost and back without Python still gets its shard's task
    // (whose Python stage then fails with an error the reader sees), rather than
    // leaving the shard unread.
    let lost = Command::WorkerLost { address: "b:1".into(), worker_uid: 2 };
    apply(&mut s, lost).unwrap();
    let tasks = worker(&mut s, "b:1", 5);
    assert_eq!(tasks.len(), 1, "its shard again");
    assert_eq!(s.tasks[&tasks[0]].worker_index, 0);
    // A plain job keeps the whole list.
    let plain = register(&mut s, DatasetDef::range(10));
    let j = job_with(&mut s, &plain, Mode::Data, None, TargetWorkers::Any, &list).unwrap();
    assert_eq!(s.jobs[&j].static_workers, list);

    // None of the listed workers can: refused, naming the stage and the workers.
    let before = s.clone();
    let e = job_with(&mut s, &ds, Mode::Data, None, TargetWorkers::Any, &["a:1"]).unwrap_err();
    let StateError::FailedPrecondition(m) = e else { panic!("{e:?}") };
    assert!(m.contains("stages[1] (python map `<lambda>`, pickled with Python 3.11.7)"), "{m}");
    assert!(m.contains("a:1 runs no Python stages") && m.contains("[a:1]"), "{m}");
    let e = job_with(&mut s, &ds, Mode::Data, None, TargetWorkers::Any, &["x:1"]).unwrap_err();
    assert!(e.to_string().contains("none of them has registered yet"), "{e}");
    assert_eq!(s, before, "a refused command changes nothing");
}

#[test]
fn a_coordinated_iteration_takes_only_joining_workers_that_can_run_it() {
    let mut s = State::default();
    python_worker(&mut s, "py:1", 1, Some("3.12.1"));
    let def = with(DatasetDef::range(10), pickled("3.12.0")).repeat_forever();
    let ds = register(&mut s, def);
    let j = off_job(&mut s, &ds, Some("rr"), false, Some(2)).unwrap();
    let (it, _) = iteration(&mut s, j, 1);
    assert_eq!(task_workers(&s, it), ["py:1"]);
    assert!(worker(&mut s, "plain:1", 2).is_empty(), "cannot run it: does not join");
    assert_eq!(python_worker(&mut s, "py:2", 3, Some("3.12.4")).len(), 1);
    assert_eq!(s.iterations[&it].coordinated.as_ref().unwrap().pending.len(), 1);
    assert_eq!(task_workers(&s, it), ["py:1", "py:2"]);
}

#[test]
fn a_pipeline_pickled_by_two_python_versions_is_refused_at_registration() {
    let mut s = State::default();
    let def = with(with(DatasetDef::range(10), pickled("3.11.7")), pickled("3.12.1"));
    let before = s.clone();
    let c = Command::RegisterDataset { dataset_id: None, def, limits: Limits::default() };
    let e = apply(&mut s, c).unwrap_err();
    let StateError::InvalidArgument(m) = e else { panic!("{e:?}") };
    assert!(m.contains("stages[1] (python map `<lambda>`, pickled with Python 3.11.7)"), "{m}");
    assert!(m.contains("stages[2] (python map `<lambda>`, pickled with Python 3.12.1)"), "{m}");
    assert!(m.contains("no worker can run both"), "{m}");
    assert_eq!(s, before, "a refused command changes nothing");
    // The same versions by reference, or pickled by one version, are fine.
    register(&mut s, with(with(DatasetDef::range(10), pickled("3.11.7")), by_reference()));
    register(&mut s, with(with(DatasetDef::range(10), pickled("3.11.7")), pickled("3.11.2")));
}

#[test]
fn a_python_version_that_is_not_one_is_refused_and_changes_nothing() {
    let mut s = State::default();
    let before = s.clone();
    for bad in ["python", "3", &"3.1".repeat(1000)] {
        let c = Command::RegisterWorker {
            address: "w:1".into(),
            worker_uid: 1,
            functions: vec![],
            python_version: Some(bad.to_string()),
            limits: Limits::default(),
        };
        let e = apply(&mut s, c).unwrap_err();
        let StateError::InvalidArgument(m) = e else { panic!("{e:?}") };
        assert!(m.contains("is not a Python version") && m.len() < 300, "{m}");
        assert_eq!(s, before, "a refused command changes nothing");
    }
    // Empty means no Python stages.
    assert!(python_worker(&mut s, "w:1", 1, Some("")).is_empty());
    assert_eq!(s.workers["w:1"].python_version, None);
}
