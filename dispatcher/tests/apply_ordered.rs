//! Pure tests of deterministic-order grants in the state machine
//! (docs/exactly-once.md, "Deterministic order"): places in the seeded order,
//! one split per grant, orphans granted whole with their place, whole splits
//! granted empty, the window, and the job's order as part of its identity.

use std::collections::BTreeSet;

use sluice_dataset::DatasetDef;
use sluice_dispatcher::order::{self, Order, Place, BLOCK};
use sluice_dispatcher::state::SplitAnswer;
use sluice_dispatcher::{apply, Command, Limits, Mode, Response, State, StateError, TargetWorkers};
use sluice_positions::{RecordSet, Run, UnitRecords};

mod common;
use common::eo::{iteration_answer, report, restore_cmd};
use common::{get_split, iteration, ok, register, worker};

const ORDER: Order = Order { seed: 11, consumers: 2 };

fn ordered_cmd(ds: &str, name: &str, order: Order, ordered: Result<(), String>) -> Command {
    Command::GetOrCreateOrderedJob {
        dataset_id: ds.into(),
        mode: Mode::Dynamic,
        job_name: Some(name.into()),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        replay: Ok(UnitRecords::One),
        limits: Limits::default(),
        order,
        ordered,
    }
}

/// A worker, an ordered job over `n` one-record units, an iteration with
/// `eps` units per split: (iteration, task, client).
fn setup(s: &mut State, n: i64, eps: u64) -> (String, u64, u64, u64, u64) {
    worker(s, "w1:1", 1);
    let ds = register(s, DatasetDef::range(n));
    let job = match ok(s, ordered_cmd(&ds, "det", ORDER, Ok(()))) {
        Response::Job { job_id, exactly_once: true, .. } => job_id,
        r => panic!("{r:?}"),
    };
    let (it, c) = iteration(s, job, eps);
    let task = s.iterations[&it].tasks[0];
    (ds, job, it, task, c)
}

fn ordered_grant(
    s: &mut State,
    task: u64,
    seq: u64,
) -> Result<(u64, u64, Vec<Run>, Place), SplitAnswer> {
    match ok(s, get_split(task, 1, seq, 0, 16)) {
        Response::OrderedSplit { answer: SplitAnswer::Split { begin, end }, skip_runs, place } => {
            Ok((begin, end, skip_runs, place))
        }
        Response::Split(a) => Err(a),
        r => panic!("{r:?}"),
    }
}

#[test]
fn splits_are_granted_one_at_a_time_in_the_seeded_order_with_their_place() {
    let mut s = State::default();
    let (_, _, _, task, _) = setup(&mut s, 25, 3);
    let splits = order::split_count(3, 25);
    assert_eq!(splits, 9);
    let mut seen = BTreeSet::new();
    for k in 0..splits {
        let (b, e, skips, place) = ordered_grant(&mut s, task, k).unwrap();
        let split = order::split_at(ORDER.seed, splits, k);
        assert_eq!((b, e), (split * 3, (split * 3 + 3).min(25)), "place {k}: max_splits ignored");
        assert_eq!(place, Place { index: k, begin: b, end: e, floor: 0 });
        assert!(skips.is_empty());
        seen.insert(split);
        // A retried request gets the same grant and place.
        assert_eq!(ordered_grant(&mut s, task, k).unwrap().3, place);
    }
    assert_eq!(seen.len() as u64, splits);
    let firsts: Vec<u64> = (0..splits).map(|k| order::split_at(ORDER.seed, splits, k)).collect();
    assert_ne!(firsts, (0..splits).collect::<Vec<_>>(), "not the source order");
    assert_eq!(ordered_grant(&mut s, task, splits), Err(SplitAnswer::EndOfSplits));
}

#[test]
fn a_lost_split_comes_back_whole_with_its_place_and_its_consumed_records_skipped() {
    let mut s = State::default();
    let (_, _, it, task, c) = setup(&mut s, 20, 4);
    let (b, e, _, place) = ordered_grant(&mut s, task, 0).unwrap();
    // Units b and b+2 consumed (not b+1): the split is not whole.
    report(&mut s, c, 0, &[(b, 0, 1), (b + 2, 0, 1)], &[], &[]).unwrap();
    ok(&mut s, Command::WorkerLost { address: "w1:1".into(), worker_uid: 1 });
    report(&mut s, c, 0, &[], &[], &[task]).unwrap();
    let tasks = worker(&mut s, "w1:1", 2);
    let fresh = *tasks.iter().find(|t| **t != task).expect("a fresh task");
    assert!(s.iterations[&it].tasks.contains(&fresh));
    let got = match ok(&mut s, get_split(fresh, 2, 0, 0, 1)) {
        Response::OrderedSplit { answer, skip_runs, place } => (answer, skip_runs, place),
        r => panic!("{r:?}"),
    };
    // From its first unit that is not whole to its end, in one grant, so its
    // consumer gets the rest in source order from one task.
    assert_eq!(got.0, SplitAnswer::Split { begin: b + 1, end: e });
    assert_eq!(got.1, vec![Run { unit: b + 2, first: 0, count: 1 }]);
    assert_eq!(got.2, place, "the same place");
}

#[test]
fn a_restored_whole_split_is_granted_empty_so_its_consumer_moves_past_it() {
    let mut s = State::default();
    let (ds, job, _, _, _) = setup(&mut s, 8, 2);
    let splits = order::split_count(2, 8);
    // The first split handed out, if it is not split 0 (whose consumption
    // would move the watermark, not leave a whole split above it).
    let k = (0..splits).find(|k| order::split_at(ORDER.seed, splits, *k) != 0).unwrap();
    let first = order::split_at(ORDER.seed, splits, k);
    let mut consumed = RecordSet::new();
    consumed.insert(Run { unit: first * 2, first: 0, count: 1 });
    consumed.insert(Run { unit: first * 2 + 1, first: 0, count: 1 });
    let mut restore = restore_cmd(job, "det", &ds, 0, consumed, 7);
    if let Command::RestoreIteration { elements_per_split, .. } = &mut restore {
        *elements_per_split = 2;
    }
    let (it, _) = iteration_answer(ok(&mut s, restore));
    let task = s.iterations[&it].tasks[0];
    for seq in 0..k {
        assert_eq!(ordered_grant(&mut s, task, seq).unwrap().3.index, seq);
    }
    let (b, e, skips, place) = ordered_grant(&mut s, task, k).unwrap();
    assert_eq!((b, e, skips), (first * 2, first * 2, vec![]), "empty: nothing is read again");
    assert_eq!(place, Place { index: k, begin: first * 2, end: first * 2 + 2, floor: 0 });
    assert_eq!(ordered_grant(&mut s, task, k + 1).unwrap().3.index, k + 1);
}

/// Found by the chaos scenario `deterministic` (a stall: docs/chaos.md): a task
/// lost after its empty grant of a restored whole split, and before its
/// consumer heard of it, left that place unannounced for good. Now the place is
/// announced again, empty, by the next task; also after reports moved the
/// watermark past the split (it is above the floor, so its consumer may wait).
#[test]
fn the_empty_grant_of_a_lost_task_is_announced_again() {
    let mut s = State::default();
    let (ds, job, _, _, _) = setup(&mut s, 8, 2);
    let splits = order::split_count(2, 8);
    let k = (0..splits).find(|k| order::split_at(ORDER.seed, splits, *k) != 0).unwrap();
    let first = order::split_at(ORDER.seed, splits, k);
    let mut consumed = RecordSet::new();
    consumed.insert(Run { unit: first * 2, first: 0, count: 1 });
    consumed.insert(Run { unit: first * 2 + 1, first: 0, count: 1 });
    let mut restore = restore_cmd(job, "det", &ds, 0, consumed, 7);
    if let Command::RestoreIteration { elements_per_split, .. } = &mut restore {
        *elements_per_split = 2;
    }
    let (it, c) = iteration_answer(ok(&mut s, restore));
    let task = s.iterations[&it].tasks[0];
    let mut before = vec![];
    for seq in 0..=k {
        before.push(ordered_grant(&mut s, task, seq).unwrap());
    }
    assert_eq!(before[k as usize].0, before[k as usize].1, "place {k} was granted empty");
    // Every unit below the empty split consumed: the watermark passes it, and
    // the place stays above the floor of the watermark's block.
    let below: Vec<(u64, u64, u64)> = (0..first * 2).map(|u| (u, 0, 1)).collect();
    report(&mut s, c, 0, &below, &[], &[]).unwrap();
    let w = s.exactly_once.iterations[&it].consumed.watermark();
    assert!(w > first * 2 + 1, "the watermark {w} passed the empty split");
    assert!(k >= order::floor(w, 2));
    ok(&mut s, Command::WorkerLost { address: "w1:1".into(), worker_uid: 1 });
    report(&mut s, c, 0, &[], &[], &[task]).unwrap();
    let tasks = worker(&mut s, "w1:1", 2);
    let fresh = *tasks.iter().find(|t| **t != task).expect("a fresh task");
    let mut after = vec![];
    for seq in 0..splits + 2 {
        match ok(&mut s, get_split(fresh, 2, seq, 0, 16)) {
            Response::OrderedSplit { answer, place, .. } => after.push((answer, place.index)),
            Response::Split(SplitAnswer::EndOfSplits) => break,
            r => panic!("{r:?}"),
        }
    }
    let empty = SplitAnswer::Split { begin: first * 2, end: first * 2 };
    assert!(after.contains(&(empty, k)), "place {k} announced again, empty: {after:?}");
}

#[test]
fn a_restored_iteration_starts_at_the_floor_of_its_watermark() {
    let mut s = State::default();
    let n = 3 * BLOCK as i64;
    let (ds, job, _, _, _) = setup(&mut s, n, 1);
    let consumed = RecordSet::below(BLOCK + 3);
    let (it, _) = iteration_answer(ok(&mut s, restore_cmd(job, "det", &ds, 0, consumed, 7)));
    let task = s.iterations[&it].tasks[0];
    let (_, _, _, place) = ordered_grant(&mut s, task, 0).unwrap();
    assert_eq!((place.index, place.floor), (BLOCK, BLOCK), "places of block 0 are all whole");
}

#[test]
fn no_place_past_the_window_is_granted_until_the_watermark_moves() {
    let mut s = State::default();
    let n = (3 * BLOCK) as i64;
    let (_, _, _, task, c) = setup(&mut s, n, 1);
    for k in 0..2 * BLOCK {
        assert_eq!(ordered_grant(&mut s, task, k).unwrap().3.index, k);
    }
    assert_eq!(ordered_grant(&mut s, task, 2 * BLOCK), Err(SplitAnswer::Wait));
    let block0: Vec<(u64, u64, u64)> = (0..BLOCK).map(|u| (u, 0, 1)).collect();
    report(&mut s, c, 0, &block0, &[], &[]).unwrap();
    assert_eq!(ordered_grant(&mut s, task, 2 * BLOCK).unwrap().3.index, 2 * BLOCK);
}

#[test]
fn the_order_is_part_of_the_jobs_identity_and_refusals_say_why() {
    let mut s = State::default();
    let (ds, job, _, _, _) = setup(&mut s, 10, 1);
    assert_eq!(s.exactly_once.orders.get(&job), Some(&ORDER));
    let before = s.clone();
    let other = Order { seed: 12, consumers: 2 };
    let err = apply(&mut s, ordered_cmd(&ds, "det", other, Ok(()))).unwrap_err();
    assert!(matches!(err, StateError::FailedPrecondition(_)), "{err:?}");
    assert!(err.to_string().contains("seed 11 and 2 consumers"), "{err}");
    let err = apply(&mut s, ordered_cmd(&ds, "new", ORDER, Err("stages[1].shuffle: mixes".into())))
        .unwrap_err();
    assert!(err.to_string().contains("deterministic order: stages[1].shuffle"), "{err}");
    for consumers in [0, order::MAX_CONSUMERS + 1] {
        let err = apply(&mut s, ordered_cmd(&ds, "new", Order { seed: 1, consumers }, Ok(())));
        assert!(matches!(err, Err(StateError::InvalidArgument(_))), "{err:?}");
    }
    // A plain exactly-once reader of the ordered job is refused.
    let plain = common::eo::eo_job_cmd(&ds, Mode::Dynamic, Some("det"), Ok(UnitRecords::One));
    let err = apply(&mut s, plain).unwrap_err();
    assert!(err.to_string().contains("deterministic order"), "{err}");
    assert_eq!(s, before, "refusals change nothing");
    // The same order joins.
    match ok(&mut s, ordered_cmd(&ds, "det", ORDER, Ok(()))) {
        Response::Job { job_id, exactly_once: true, .. } => assert_eq!(job_id, job),
        r => panic!("{r:?}"),
    }
}
