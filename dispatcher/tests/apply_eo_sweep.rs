//! Pure tests of the end-of-epoch sweep (`SweepIteration`, docs/exactly-once.md,
//! "Records delivered and never consumed"): units granted to tasks that ended
//! normally, and not whole, are read again only when every task ended and every
//! current consumer said it holds nothing of exactly those tasks. No network,
//! no clock.

use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{apply, Command, Response, State};
use sluice_positions::UnitRecords;

mod common;
use common::eo::{eo_grant, eo_setup, report};
use common::{finish, iteration, ok, worker};

fn sweep(s: &mut State, it: u64, tasks: u64, drained: &[u64]) -> u64 {
    let cmd = Command::SweepIteration { iteration_id: it, tasks, drained: drained.to_vec() };
    match apply(s, cmd).expect("a sweep is never refused") {
        Response::Swept { orphans } => orphans,
        other => panic!("unexpected answer {other:?}"),
    }
}

/// One worker, two consumers, an exactly-once job over 4 one-record units, all
/// granted to the worker's task, which ended; c1 consumed units 0 and 2.
fn ended_with_units_1_and_3_unconsumed(s: &mut State) -> (u64, u64, u64, u64) {
    worker(s, "w1:1", 1);
    let (_, job) = eo_setup(s, 4, UnitRecords::One);
    let (it, c1) = iteration(s, job, 1);
    let (_, c2) = iteration(s, job, 1);
    let t1 = s.iterations[&it].tasks[0];
    assert_eq!(eo_grant(s, t1, 1, 0, 4).0, SplitAnswer::Split { begin: 0, end: 4 });
    assert_eq!(eo_grant(s, t1, 1, 1, 1).0, SplitAnswer::EndOfSplits);
    finish(s, "w1:1", vec![t1]);
    report(s, c1, 0, &[(0, 0, 1), (2, 0, 1)], &[], &[]).unwrap();
    (it, t1, c1, c2)
}

#[test]
fn units_no_consumer_holds_are_read_again_by_a_new_task_skipping_consumed_records() {
    let mut s = State::default();
    let (it, t1, c1, c2) = ended_with_units_1_and_3_unconsumed(&mut s);
    assert!(!s.iterations[&it].finished, "units 1 and 3 were never consumed");
    assert_eq!(sweep(&mut s, it, 1, &[c1, c2]), 2, "units 1 and 3 (unit 2 is whole)");
    let tasks = s.iterations[&it].tasks.clone();
    assert_eq!(tasks.len(), 2, "a fresh task reads them");
    let t2 = tasks[1];
    assert_ne!(t2, t1);
    assert_eq!(eo_grant(&mut s, t2, 1, 0, 8), (SplitAnswer::Split { begin: 1, end: 2 }, vec![]));
    assert_eq!(eo_grant(&mut s, t2, 1, 1, 8), (SplitAnswer::Split { begin: 3, end: 4 }, vec![]));
    assert_eq!(eo_grant(&mut s, t2, 1, 2, 1).0, SplitAnswer::EndOfSplits);
    finish(&mut s, "w1:1", vec![t2]);
    assert!(!s.iterations[&it].finished);
    report(&mut s, c2, 0, &[(1, 0, 1), (3, 0, 1)], &[], &[]).unwrap();
    assert!(s.iterations[&it].finished);
}

#[test]
fn no_sweep_while_a_consumer_may_hold_records_or_a_task_runs() {
    let mut s = State::default();
    let (it, _, c1, c2) = ended_with_units_1_and_3_unconsumed(&mut s);
    let before = s.clone();
    assert_eq!(sweep(&mut s, it, 1, &[c1]), 0, "c2 did not say it is drained");
    assert_eq!(sweep(&mut s, it, 2, &[c1, c2]), 0, "drained of tasks the iteration does not have");
    assert_eq!(sweep(&mut s, it, 0, &[c1, c2]), 0);
    assert_eq!(sweep(&mut s, it + 100, 1, &[c1, c2]), 0, "an unknown iteration");
    assert_eq!(s, before, "a sweep that is not due changes nothing");

    // A task still running (a worker registered meanwhile got one): not due.
    let mut s2 = before.clone();
    worker(&mut s2, "w2:1", 2);
    assert_eq!(s2.iterations[&it].tasks.len(), 2, "the new worker got a task");
    assert_eq!(sweep(&mut s2, it, 2, &[c1, c2]), 0, "a task has not ended");
    // Once c2 leaves, c1 alone is every consumer.
    let mut s3 = before;
    ok(&mut s3, Command::ReleaseClient { client_id: c2 });
    assert_eq!(sweep(&mut s3, it, 1, &[c1]), 2);
    assert_eq!(sweep(&mut s3, it, 2, &[c1]), 0, "orphans already wait: applied twice, once");
}

#[test]
fn nothing_to_sweep_when_every_granted_unit_is_whole() {
    let mut s = State::default();
    let (it, _, c1, c2) = ended_with_units_1_and_3_unconsumed(&mut s);
    report(&mut s, c1, 0, &[(1, 0, 1)], &[], &[]).unwrap();
    let before = s.clone();
    // Unit 3 is not whole: due. Consume it too, and nothing is left to sweep.
    report(&mut s, c2, 0, &[(3, 0, 1)], &[], &[]).unwrap();
    assert!(s.iterations[&it].finished);
    assert_eq!(sweep(&mut s, it, 1, &[c1, c2]), 0);
    let mut s = before;
    assert_eq!(sweep(&mut s, it, 1, &[c1, c2]), 1, "unit 3 only");
}
