use sluice_positions::wire::{ends_from_flat, runs_from_flat};
use sluice_positions::{Run, UnitRecords};

use super::*;

fn consumption() -> Consumption {
    Consumption::new("job".into(), "ds".into(), 2, None)
}

fn ok(watermark: u64, generation: u64) -> pb::ClientHeartbeatResponse {
    pb::ClientHeartbeatResponse {
        checkpoint_watermark: watermark,
        checkpoint_generation: generation,
        ..Default::default()
    }
}

/// The report's records as runs: its runs, then its spans of first records one
/// unit at a time.
fn runs(r: &Report) -> Vec<Run> {
    let mut runs = runs_from_flat(&r.consumed.runs).unwrap();
    for (begin, count) in ends_from_flat(&r.consumed.firsts).unwrap() {
        runs.extend((begin..begin + count).map(|u| Run::record(u, 0)));
    }
    runs
}

#[test]
fn first_records_of_consecutive_units_go_as_one_span() {
    let c = consumption();
    for u in 100..1100 {
        assert!(c.consume(1, &Origin::record(u, 0)));
    }
    let r = c.take_report().unwrap();
    assert!(r.consumed.runs.is_empty());
    assert_eq!(r.consumed.firsts, vec![100, 1000], "one (first unit, count) pair");
    assert_eq!(c.own_run_count(), 1, "the position log holds one span too");
}

#[test]
fn consumed_records_are_reported_coalesced_and_cleared_only_when_answered() {
    let c = consumption();
    assert!(c.take_report().is_none(), "nothing consumed, nothing to report");
    for r in 0..3 {
        assert!(c.consume(1, &Origin::record(5, r)));
    }
    c.consume(1, &Origin { runs: vec![], unit_ends: vec![(5, 3)] });
    let first = c.take_report().expect("pending");
    assert_eq!(runs(&first), vec![Run { unit: 5, first: 0, count: 3 }]);
    assert_eq!(ends_from_flat(&first.consumed.unit_ends).unwrap(), vec![(5, 3)]);
    assert_eq!(first.consumed.generation, 0);
    // Consumed while the report is in flight: not merged into it.
    c.consume(1, &Origin::record(5, 3));
    // The call failed: the same report goes again.
    let again = c.take_report().unwrap();
    assert_eq!((again.seq, runs(&again)), (first.seq, runs(&first)));
    c.answered(again.seq, &ok(0, 0));
    let next = c.take_report().expect("the record consumed meanwhile");
    assert_eq!(runs(&next), vec![Run::record(5, 3)]);
    c.answered(next.seq, &ok(0, 0));
    assert!(c.take_report().is_none());
}

#[test]
fn a_report_carries_at_most_the_limit_of_runs_and_the_rest_follows() {
    let c = consumption();
    let n = MAX_REPORT_RUNS as u64 + 10;
    for u in 0..n {
        c.consume(1, &Origin::record(2 * u, 0)); // never coalesce
    }
    let first = c.take_report().unwrap();
    assert_eq!(runs(&first).len(), MAX_REPORT_RUNS);
    c.answered(first.seq, &ok(0, 0));
    let rest = c.take_report().unwrap();
    assert_eq!(runs(&rest).len(), 10);
    assert_eq!(runs(&rest)[0], Run::record(2 * MAX_REPORT_RUNS as u64, 0));
}

#[test]
fn reports_keep_generations_apart_and_announce_a_new_one() {
    let c = consumption();
    c.consume(1, &Origin::record(0, 0));
    let p = c.position();
    assert_eq!(p.generation, 0);
    c.consume(1, &Origin::record(1, 0));
    let a = c.take_report().unwrap();
    assert_eq!((a.consumed.generation, runs(&a)), (0, vec![Run::record(0, 0)]));
    c.answered(a.seq, &ok(0, 0));
    let b = c.take_report().unwrap();
    assert_eq!((b.consumed.generation, runs(&b)), (1, vec![Run::record(1, 0)]));
    c.answered(b.seq, &ok(0, 0));
    // A position with nothing consumed after it: the dispatcher still learns the
    // generation, once.
    c.position();
    let e = c.take_report().expect("announce generation 2");
    assert_eq!((e.consumed.generation, runs(&e).len()), (2, 0));
    c.answered(e.seq, &ok(0, 0));
    assert!(c.take_report().is_none());
}

#[test]
fn a_lost_task_is_acknowledged_only_with_everything_consumed_before() {
    let c = consumption();
    c.consume(7, &Origin::record(0, 0));
    c.position();
    c.consume(7, &Origin::record(1, 0));
    c.task_lost(7);
    assert!(!c.consume(7, &Origin::record(2, 0)), "nothing more is taken from a lost task");
    assert!(c.is_lost(7));
    let a = c.take_report().unwrap();
    assert!(a.consumed.lost_tasks_done.is_empty(), "generation 1's record is not in this one");
    c.answered(a.seq, &ok(0, 0));
    let b = c.take_report().unwrap();
    assert_eq!(runs(&b), vec![Run::record(1, 0)]);
    assert_eq!(b.consumed.lost_tasks_done, vec![7]);
    // Not answered: the acknowledgement goes again.
    let b2 = c.take_report().unwrap();
    assert_eq!(b2.consumed.lost_tasks_done, vec![7]);
    c.answered(b2.seq, &ok(0, 0));
    assert!(c.take_report().is_none(), "acknowledged once answered");
    c.task_lost(7);
    assert!(c.take_report().is_none(), "a task is acknowledged once");
}

#[test]
fn a_position_is_the_watermark_and_own_records_above_it() {
    let c = consumption();
    for u in [0, 1, 3, 4] {
        c.consume(1, &Origin::record(u, 0));
    }
    let p = c.position();
    assert_eq!((p.job_name.as_str(), p.dataset_id.as_str(), p.repetition), ("job", "ds", 2));
    assert_eq!((p.generation, p.consumed.watermark()), (0, 0));
    assert!(p.consumed.contains(3, 0) && !p.consumed.contains(2, 0));
    assert_eq!(c.generation(), 1);
    // Answered for generation 1: usable now; every unit below 3 was consumed.
    c.note_watermark(3, 1);
    let p = c.position();
    assert_eq!((p.generation, p.consumed.watermark()), (1, 3));
    assert!(p.consumed.contains(2, 0), "unit 2 was consumed by another reader");
    assert!(p.consumed.contains(4, 0) && !p.consumed.contains(5, 0));
    assert_eq!(c.own_run_count(), 1, "own records below the watermark are pruned: one span (3, 4)");
}

#[test]
fn a_watermark_of_a_later_generation_waits_until_it_is_reached() {
    let c = consumption();
    c.consume(1, &Origin::record(0, 0));
    c.note_watermark(10, 1);
    let p = c.position();
    assert_eq!(p.consumed.watermark(), 0, "generation 0 may not claim checkpoint 1's units");
    assert!(!p.consumed.contains(5, 0));
    let p = c.position();
    assert_eq!((p.generation, p.consumed.watermark()), (1, 10));
    // An answer about an older generation never lowers it.
    c.note_watermark(4, 0);
    assert_eq!(c.position().consumed.watermark(), 10);
}

#[test]
fn the_own_set_stays_small_without_positions_as_watermarks_arrive() {
    let c = consumption();
    for u in 0..20_000u64 {
        c.consume(1, &Origin::record(u, 0));
        if u % 1000 == 999 {
            c.note_watermark(u - 10, 0);
        }
    }
    assert!(c.own_run_count() <= 1010, "{}", c.own_run_count());
}

#[test]
fn a_restored_reader_continues_the_generation_and_claims_the_restored_records() {
    let mut restored = RecordSet::from_parts(4, [Run::record(6, 0)], [(7, 3)]);
    restored.insert(Run { unit: 7, first: 0, count: 1 });
    let pos = Position {
        job_name: "job".into(),
        dataset_id: "ds".into(),
        repetition: 2,
        generation: 5,
        consumed: restored,
        merged_consumers: 3,
    };
    let c = Consumption::new("job".into(), "ds".into(), 2, Some(&pos));
    assert!(c.take_report().is_none(), "nothing new to report");
    c.consume(1, &Origin::record(5, 0));
    let p = c.position();
    assert_eq!((p.generation, p.merged_consumers), (6, 1));
    assert!(p.consumed.contains(3, 0) && p.consumed.contains(5, 0) && p.consumed.contains(6, 0));
    assert!(p.consumed.contains(7, 0) && !p.consumed.contains(7, 1));
    assert_eq!(p.consumed.unit_end(7), Some(3));
    assert!(!p.consumed.unit_complete(7, UnitRecords::Counted));
}

#[test]
fn drained_is_said_only_with_everything_consumed_reported_and_again_when_asked() {
    let c = consumption();
    c.consume(1, &Origin::record(0, 0));
    let first = c.take_report().expect("pending");
    assert_eq!(first.consumed.drained_tasks, 0, "taken before the reader drained");
    c.set_drained(2);
    c.answered(first.seq, &ok(0, 0));
    let said = c.take_report().expect("the drained state is news");
    assert_eq!((said.consumed.drained_tasks, runs(&said).len()), (2, 0));
    c.answered(said.seq, &ok(0, 0));
    assert!(c.take_report().is_none(), "said once");
    c.resend_drained();
    let again = c.take_report().expect("a new leader must hear it");
    assert_eq!(again.consumed.drained_tasks, 2);
    c.answered(again.seq, &ok(0, 0));

    // Split reports: only the last one, which leaves nothing behind, says it.
    let n = MAX_REPORT_RUNS as u64 + 1;
    for u in 0..n {
        c.consume(1, &Origin::record(2 * u + 10, 0));
    }
    c.set_drained(3);
    let head = c.take_report().unwrap();
    assert_eq!(head.consumed.drained_tasks, 0, "runs are left for the next report");
    c.answered(head.seq, &ok(0, 0));
    let tail = c.take_report().unwrap();
    assert_eq!(tail.consumed.drained_tasks, 3);

    // A message of elements: not drained any more, nothing to say.
    c.answered(tail.seq, &ok(0, 0));
    c.set_drained(0);
    c.resend_drained();
    assert!(c.take_report().is_none());
}

#[test]
fn positions_faster_than_reports_or_a_full_report_are_a_backlog() {
    let c = consumption();
    assert!(!c.backlog(), "nothing pending");
    c.consume(1, &Origin::record(0, 0));
    assert!(!c.backlog(), "one generation's records go in one report");
    c.position();
    c.consume(1, &Origin::record(1, 0));
    assert!(c.backlog(), "two generations pending take two reports");
    let first = c.take_report().expect("generation 0");
    c.answered(first.seq, &ok(0, 0));
    assert!(!c.backlog(), "generation 1 alone is left");
    let second = c.take_report().expect("generation 1");
    c.answered(second.seq, &ok(0, 1));
    for u in 0..=MAX_REPORT_RUNS as u64 {
        c.consume(1, &Origin::record(10 + 2 * u, 0));
    }
    assert!(c.backlog(), "more runs than one report carries");
}
