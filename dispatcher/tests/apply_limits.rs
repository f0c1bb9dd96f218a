//! Pure tests of the bounds the state machine enforces (issue 14): a worker is
//! bound to its registration, counts stop at the caps a command carries, and
//! finished state is forgotten.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};

mod common;
use common::{finish, get_split, iteration, job, ok, register, split, worker};

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
        python_version: None,
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

// Quotas per client identity (issue 31, defect 6; `quotas.rs`).

use sluice_dispatcher::quotas::{Charge, Quotas};

/// `c` charged to `owner` with `quotas` (and `bytes` for a definition).
fn charged(owner: Option<&str>, bytes: u64, quotas: Quotas, c: Command) -> Command {
    let charge = Charge { owner: owner.map(String::from), bytes, quotas };
    Command::Charged { charge, command: Box::new(c) }
}

fn dataset_cmd(id: &str) -> Command {
    Command::RegisterDataset {
        dataset_id: Some(id.into()),
        def: DatasetDef::range(5),
        limits: Limits::default(),
    }
}

fn job_cmd(dataset: &str, name: Option<&str>) -> Command {
    Command::GetOrCreateJob {
        dataset_id: dataset.into(),
        mode: Mode::Off,
        job_name: name.map(String::from),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        limits: Limits::default(),
    }
}

fn iteration_cmd(job_id: u64, repetition: u64) -> Command {
    Command::GetOrCreateIteration {
        job_id,
        repetition,
        elements_per_split: 1,
        limits: Limits::default(),
    }
}

fn job_id_of(r: Response) -> u64 {
    match r {
        Response::Job { job_id, .. } => job_id,
        r => panic!("{r:?}"),
    }
}

#[test]
fn one_identity_at_its_quotas_is_refused_while_another_is_served() {
    let q = Quotas { datasets: 2, jobs: 2, live_iterations: 2, clients: 3, ..Quotas::default() };
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let a = |c| charged(Some("a"), 10, q, c);
    let b = |c| charged(Some("b"), 10, q, c);
    ok(&mut s, a(dataset_cmd("a1")));
    ok(&mut s, a(dataset_cmd("a2")));
    refused_at_cap(&mut s, a(dataset_cmd("a3")), "--quota-datasets 2");
    let err = apply(&mut s, a(dataset_cmd("a3"))).unwrap_err().to_string();
    assert!(err.contains("the client `a` holds 2 datasets"), "{err}");
    ok(&mut s, a(dataset_cmd("a1"))); // the same registration again is no new dataset
                                      // Another identity is not affected.
    ok(&mut s, b(dataset_cmd("b1")));
    // Jobs: `a` makes two, a third is refused; joining one by name is free.
    let ja = job_id_of(ok(&mut s, a(job_cmd("a1", Some("ja")))));
    ok(&mut s, a(job_cmd("a1", None)));
    refused_at_cap(&mut s, a(job_cmd("a1", None)), "--quota-jobs 2");
    ok(&mut s, a(job_cmd("a1", Some("ja"))));
    let jb = job_id_of(ok(&mut s, b(job_cmd("b1", None))));
    // Iterations: `a` makes two; its third is refused, `b`'s is not, and
    // `b` joining `a`'s iteration costs `a` nothing.
    ok(&mut s, a(iteration_cmd(ja, 0)));
    ok(&mut s, a(iteration_cmd(ja, 1)));
    refused_at_cap(&mut s, a(iteration_cmd(ja, 2)), "--quota-live-iterations 2");
    ok(&mut s, b(iteration_cmd(jb, 0)));
    ok(&mut s, b(iteration_cmd(ja, 0)));
    // Consumers: `a` holds two; a third joins, a fourth is refused.
    ok(&mut s, a(iteration_cmd(ja, 0)));
    refused_at_cap(&mut s, a(iteration_cmd(ja, 1)), "--quota-clients 3");
    // A command without a charge (logged by an earlier build) counts against
    // the dispatcher-wide caps only.
    ok(&mut s, iteration_cmd(ja, 2));
    // Releasing a consumer frees room in its owner's quota.
    let a_client = *s.owners.clients.iter().find(|(_, o)| *o == "a").unwrap().0;
    ok(&mut s, Command::ReleaseClient { client_id: a_client });
    ok(&mut s, a(iteration_cmd(ja, 0)));
    // Without an identity (no tokens), only the dispatcher-wide caps apply.
    for i in 0..5 {
        ok(&mut s, charged(None, 10, q, dataset_cmd(&format!("anon{i}"))));
    }
}

#[test]
fn finished_iterations_free_the_live_quota_and_count_against_the_held_one() {
    let q = Quotas { iterations: 2, live_iterations: 1, ..Quotas::default() };
    let mut s = State::default();
    worker(&mut s, "w1:1", 1);
    let a = |c| charged(Some("a"), 0, q, c);
    ok(&mut s, a(dataset_cmd("d")));
    let j = job_id_of(ok(&mut s, a(job_cmd("d", Some("j")))));
    let finish_repetition = |s: &mut State, r: u64| {
        let it = s.jobs[&j].iterations[&r];
        let task = s.iterations[&it].tasks[0];
        assert_eq!(finish(s, "w1:1", vec![task]), vec![it]);
    };
    ok(&mut s, a(iteration_cmd(j, 0)));
    refused_at_cap(&mut s, a(iteration_cmd(j, 1)), "--quota-live-iterations 1");
    finish_repetition(&mut s, 0);
    ok(&mut s, a(iteration_cmd(j, 1)));
    finish_repetition(&mut s, 1);
    refused_at_cap(&mut s, a(iteration_cmd(j, 2)), "--quota-iterations 2");
}

#[test]
fn dataset_definitions_are_bounded_in_bytes_per_identity_and_in_all() {
    let q = Quotas { dataset_bytes: 100, max_dataset_bytes: 250, ..Quotas::default() };
    let mut s = State::default();
    ok(&mut s, charged(Some("a"), 60, q, dataset_cmd("a1")));
    refused_at_cap(
        &mut s,
        charged(Some("a"), 41, q, dataset_cmd("a2")),
        "--quota-dataset-bytes 100",
    );
    ok(&mut s, charged(Some("a"), 40, q, dataset_cmd("a2")));
    ok(&mut s, charged(Some("b"), 100, q, dataset_cmd("b1")));
    // 200 held: 51 more would pass 250, whoever sends them.
    refused_at_cap(&mut s, charged(Some("c"), 51, q, dataset_cmd("c1")), "--max-dataset-bytes 250");
    refused_at_cap(&mut s, charged(None, 51, q, dataset_cmd("c1")), "--max-dataset-bytes 250");
    let err = apply(&mut s, charged(None, 51, q, dataset_cmd("c1"))).unwrap_err().to_string();
    assert!(err.contains("51 bytes") && err.contains("holds 200 bytes"), "{err}");
    ok(&mut s, charged(Some("c"), 50, q, dataset_cmd("c1")));
}

#[test]
fn an_unused_dataset_is_forgotten_only_at_the_use_count_the_leader_saw() {
    let mut s = State::default();
    let q = Quotas { datasets: 1, ..Quotas::default() };
    ok(&mut s, charged(Some("a"), 10, q, dataset_cmd("d")));
    let forget = |uses| Command::ForgetDataset { dataset_id: "d".into(), uses };
    // Used by a job: kept.
    let j = job_id_of(ok(&mut s, job_cmd("d", None)));
    assert_eq!(ok(&mut s, forget(1)), Response::DatasetForgotten { changed: false });
    assert!(s.datasets.contains_key("d"));
    // The job is forgotten after its iteration; the dataset is then unused at
    // use count 1 (its job). Registered again meanwhile: count 2, a proposal
    // made at 1 is void.
    let (it, c) = iteration(&mut s, j, 1);
    ok(&mut s, Command::ReleaseClient { client_id: c });
    ok(&mut s, Command::GcIteration { iteration_id: it });
    ok(&mut s, Command::ForgetIteration { iteration_id: it });
    assert!(!s.jobs.contains_key(&j));
    ok(&mut s, charged(Some("a"), 10, q, dataset_cmd("d")));
    assert_eq!(ok(&mut s, forget(1)), Response::DatasetForgotten { changed: false });
    assert_eq!(ok(&mut s, forget(2)), Response::DatasetForgotten { changed: true });
    assert!(!s.datasets.contains_key("d") && s.owners.datasets.is_empty());
    // Its owner's quota is free again, and its id can be registered anew.
    ok(&mut s, charged(Some("a"), 10, q, dataset_cmd("d")));
    assert_eq!(ok(&mut s, forget(0)), Response::DatasetForgotten { changed: true });
}

#[test]
fn forgetting_an_iteration_frees_its_owners_quotas() {
    let q = Quotas { jobs: 1, iterations: 1, clients: 1, ..Quotas::default() };
    let mut s = State::default();
    let a = |c| charged(Some("a"), 0, q, c);
    ok(&mut s, a(dataset_cmd("d")));
    let j = job_id_of(ok(&mut s, a(job_cmd("d", None))));
    let (it, c) = match ok(&mut s, a(iteration_cmd(j, 0))) {
        Response::Iteration { iteration_id, client_id } => (iteration_id, client_id),
        r => panic!("{r:?}"),
    };
    refused_at_cap(&mut s, a(job_cmd("d", None)), "--quota-jobs 1");
    ok(&mut s, Command::ReleaseClient { client_id: c });
    ok(&mut s, Command::GcIteration { iteration_id: it });
    ok(&mut s, Command::ForgetIteration { iteration_id: it });
    assert!(s.owners.jobs.is_empty() && s.owners.iterations.is_empty());
    assert!(s.owners.clients.is_empty());
    let j = job_id_of(ok(&mut s, a(job_cmd("d", None))));
    ok(&mut s, a(iteration_cmd(j, 0)));
}

#[test]
fn charges_do_not_nest_and_a_batch_is_not_charged() {
    let q = Quotas::default();
    let mut s = State::default();
    let inner = charged(Some("a"), 0, q, dataset_cmd("d"));
    let before = s.clone();
    let err = apply(&mut s, charged(Some("a"), 0, q, inner)).unwrap_err();
    assert!(matches!(err, StateError::InvalidArgument(_)), "{err:?}");
    let batch = Command::Batch(vec![dataset_cmd("d")]);
    let err = apply(&mut s, charged(Some("a"), 0, q, batch)).unwrap_err();
    assert!(matches!(err, StateError::InvalidArgument(_)), "{err:?}");
    assert_eq!(s, before);
}
