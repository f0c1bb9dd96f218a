//! The lifecycle checker on hand-made histories: what passes, and each rule
//! that fails.

use super::check;
use crate::checker::verdict::{COMPLETION, EXACTLY_ONCE, LOSS_CAUSE, NO_DUPLICATES, OFF_COPIES};
use crate::history::{value_runs, Event, Fault, JobSpec, Pipeline};

const W: [&str; 4] = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"];

fn start() -> Vec<Event> {
    let mut v = vec![Event::Start {
        seed: 1,
        scenario: "lifecycle".into(),
        mode: "mixed".into(),
        dataset_len: 0,
        workers: 3,
        consumers: 4,
        epochs: 0,
        work_dir_kind: "local disk".into(),
        exactly_once: false,
        order: None,
        lifecycle: true,
    }];
    v.extend(W[..3].iter().map(|w| Event::WorkerUp { t_ms: 0, worker: w.to_string() }));
    v
}

fn spec(mode: &str, n: u64) -> JobSpec {
    JobSpec {
        name: None,
        mode: mode.into(),
        exactly_once: false,
        pipeline: Pipeline::Range { n },
        readers: 1,
        accept_loss: false,
        checkpoint_after: None,
    }
}

fn job(t_ms: u64, job: u32, spec: JobSpec) -> Event {
    Event::JobStart { t_ms, job, spec }
}

fn end(t_ms: u64, job: u32, incarnation: u32, outcome: &str, mut values: Vec<i64>) -> Event {
    Event::JobEnd {
        t_ms,
        job,
        reader: 0,
        incarnation,
        outcome: outcome.into(),
        values: value_runs(&mut values),
        rolled_back: 0,
        lost_workers: vec![],
    }
}

fn lost(mut e: Event, workers: &[&str]) -> Event {
    if let Event::JobEnd { lost_workers, .. } = &mut e {
        *lost_workers = workers.iter().map(|w| w.to_string()).collect();
    }
    e
}

fn kill(t_ms: u64, id: u32, worker: &str) -> [Event; 3] {
    [
        Event::FaultStart { t_ms, id, fault: Fault::WorkerKilled { worker: worker.into() } },
        Event::WorkerUp { t_ms: t_ms + 100, worker: W[3].into() },
        Event::FaultEnd { t_ms: t_ms + 100, id },
    ]
}

fn invariants(events: &[Event]) -> Vec<&'static str> {
    check(events).violations.iter().map(|v| v.invariant).collect()
}

#[test]
fn completed_jobs_and_failures_the_run_caused_pass() {
    let mut h = start();
    // DYNAMIC, every value once.
    h.push(job(10, 0, spec("dynamic", 50)));
    h.push(end(900, 0, 0, "end", (0..50).collect()));
    // OFF on three workers: three whole copies.
    h.push(job(10, 1, spec("off", 20)));
    h.push(end(900, 1, 0, "end", (0..20).chain(0..20).chain(0..20).collect()));
    // Exactly-once: checkpointed at 30 (what came after is not kept), restored.
    let eo = JobSpec { exactly_once: true, checkpoint_after: Some(30), ..spec("dynamic", 50) };
    h.push(job(10, 2, eo));
    h.push(end(500, 2, 0, "checkpointed", (0..30).collect()));
    h.push(end(900, 2, 1, "end", (30..50).collect()));
    // A worker killed mid-job: accepted loss, and DataLost, both naming it.
    h.push(job(1_000, 3, JobSpec { accept_loss: true, ..spec("dynamic", 50) }));
    h.push(job(1_000, 4, spec("dynamic", 50)));
    h.extend(kill(1_200, 1, W[0]));
    h.push(lost(end(15_000, 3, 0, "end", (0..40).collect()), &[W[0]]));
    h.push(lost(end(15_000, 4, 0, "data lost: task 9 on worker …", (0..45).collect()), &[W[0]]));
    let r = check(&h);
    assert!(r.passed(), "{:?}", r.violations);
    assert_eq!(
        (r.summary.jobs_started, r.summary.jobs_completed, r.summary.jobs_failed_with_reason),
        (5, 4, 1)
    );
}

#[test]
fn a_job_that_waits_on_a_worker_killed_long_before_it_started_fails_the_check() {
    // Issue 31, defect 1: a new job had a task on a worker that died before it.
    let mut h = start();
    h.extend(kill(1_000, 1, W[0]));
    h.push(job(90_000, 0, spec("dynamic", 50)));
    let gave_up = "worker at 127.0.0.1:1 was unavailable for 45s (30 attempts), giving up";
    h.push(end(135_000, 0, 0, gave_up, (0..30).collect()));
    assert_eq!(invariants(&h), [COMPLETION]);
    // The same loss reported as DataLost: the worker died too long before the job.
    let mut h = start();
    h.extend(kill(1_000, 1, W[0]));
    h.push(job(90_000, 0, spec("dynamic", 50)));
    h.push(lost(end(135_000, 0, 0, "data lost", (0..30).collect()), &[W[0]]));
    assert_eq!(invariants(&h), [LOSS_CAUSE]);
}

#[test]
fn losses_must_name_a_worker_the_run_killed_and_a_drain_loses_nothing_in_dynamic() {
    let mut h = start();
    h.push(job(10, 0, JobSpec { accept_loss: true, ..spec("dynamic", 50) }));
    h.push(lost(end(900, 0, 0, "end", (0..40).collect()), &[W[1]]));
    assert_eq!(invariants(&h), [LOSS_CAUSE]);
    let mut h = start();
    h.push(job(10, 0, JobSpec { accept_loss: true, ..spec("dynamic", 50) }));
    h.push(Event::FaultStart {
        t_ms: 20,
        id: 1,
        fault: Fault::WorkerDrained { worker: W[1].into() },
    });
    h.push(Event::FaultEnd { t_ms: 200, id: 1 });
    h.push(lost(end(900, 0, 0, "end", (0..40).collect()), &[W[1]]));
    assert_eq!(invariants(&h), [LOSS_CAUSE]);
}

#[test]
fn duplicates_silent_losses_short_copies_and_hangs_are_violations() {
    let mut h = start();
    h.push(job(10, 0, spec("dynamic", 50)));
    h.push(end(900, 0, 0, "end", (0..50).chain([7]).collect()));
    assert_eq!(invariants(&h), [NO_DUPLICATES]);
    let mut h = start();
    h.push(job(10, 0, spec("dynamic", 50)));
    h.push(end(900, 0, 0, "end", (0..49).collect()));
    assert_eq!(invariants(&h), [EXACTLY_ONCE]);
    let eo = JobSpec { exactly_once: true, checkpoint_after: Some(30), ..spec("dynamic", 50) };
    let mut h = start();
    h.push(job(10, 0, eo));
    h.push(end(500, 0, 0, "checkpointed", (0..30).collect()));
    h.push(end(900, 0, 1, "end", (31..50).collect()));
    assert_eq!(invariants(&h), [EXACTLY_ONCE]);
    let mut h = start();
    h.push(job(10, 0, spec("off", 20)));
    h.push(end(900, 0, 0, "end", (0..20).chain(0..20).chain(0..10).collect()));
    assert_eq!(invariants(&h), [OFF_COPIES]);
    let mut h = start();
    h.push(job(10, 0, spec("off", 20)));
    h.push(end(900, 0, 0, "end", (0..20).chain(0..20).chain(0..20).chain(0..20).collect()));
    assert_eq!(invariants(&h), [OFF_COPIES]);
    let mut h = start();
    h.push(job(10, 0, spec("dynamic", 50)));
    h.push(end(180_010, 0, 0, "no end after 180s (the harness's deadline)", vec![]));
    assert_eq!(invariants(&h), [COMPLETION]);
    let mut h = start();
    h.push(job(10, 0, spec("dynamic", 50)));
    assert_eq!(invariants(&h), [COMPLETION]);
}
