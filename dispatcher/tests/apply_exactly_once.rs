//! Pure tests of exactly-once jobs and consumed reports in the state machine
//! (docs/exactly-once.md): no network, no clock. Worker deaths and restores
//! are `apply_eo_recovery.rs`.

use sluice_dataset::DatasetDef;
use sluice_dispatcher::{apply, Command, Limits, Mode, State, StateError, TargetWorkers};
use sluice_positions::UnitRecords;

mod common;
use common::eo::{eo_job_cmd, eo_setup, job_answer, report, report_spans};
use common::{iteration, job, off_job, register};

#[test]
fn an_exactly_once_job_is_created_only_where_it_can_be_replayed() {
    let mut s = State::default();
    let ds = register(&mut s, DatasetDef::range(10));
    let refused = |s: &mut State, c: Command| {
        let before = s.clone();
        let err = apply(s, c).unwrap_err();
        assert_eq!(*s, before, "a refusal changes nothing");
        assert!(matches!(err, StateError::FailedPrecondition(_)), "{err:?}");
        err.to_string()
    };
    let err = refused(&mut s, eo_job_cmd(&ds, Mode::Off, Some("a"), Ok(UnitRecords::One)));
    assert!(err.contains("DYNAMIC") && err.contains("mode=OFF"), "{err}");
    let not_replayable = Err("stages[1].repeat cannot be replayed".to_string());
    let err = refused(&mut s, eo_job_cmd(&ds, Mode::Dynamic, Some("a"), not_replayable));
    assert!(err.contains("stages[1].repeat"), "the check's reason is passed on: {err}");
    let mut c = eo_job_cmd(&ds, Mode::Dynamic, Some("a"), Ok(UnitRecords::One));
    if let Command::GetOrCreateExactlyOnceJob { num_consumers, .. } = &mut c {
        *num_consumers = Some(2);
    }
    assert!(refused(&mut s, c).contains("coordinated reads"));
    let mut c = eo_job_cmd(&ds, Mode::Dynamic, Some("a"), Ok(UnitRecords::One));
    if let Command::GetOrCreateExactlyOnceJob { cross_trainer_cache, .. } = &mut c {
        *cross_trainer_cache = true;
    }
    assert!(refused(&mut s, c).contains("cross-trainer cache"));

    let c = eo_job_cmd(&ds, Mode::Dynamic, Some("a"), Ok(UnitRecords::Counted));
    let (id, eo) = job_answer(apply(&mut s, c)).unwrap();
    assert!(eo);
    assert_eq!(s.exactly_once.jobs.get(&id), Some(&UnitRecords::Counted));
    assert!(
        job_answer(apply(&mut s, eo_job_cmd(&ds, Mode::Dynamic, None, Ok(UnitRecords::One))))
            .unwrap()
            .1
    );
}

#[test]
fn joining_by_name_keeps_the_delivery_the_job_was_created_with() {
    let mut s = State::default();
    let (ds, eo_job) = eo_setup(&mut s, 10, UnitRecords::One);
    // A plain request joins the exactly-once job, and the answer says so.
    let c = Command::GetOrCreateJob {
        dataset_id: ds.clone(),
        mode: Mode::Dynamic,
        job_name: Some("eo".into()),
        target_workers: TargetWorkers::Auto,
        static_workers: vec![],
        cross_trainer_cache: false,
        num_consumers: None,
        limits: Limits::default(),
    };
    assert_eq!(job_answer(apply(&mut s, c)).unwrap(), (eo_job, true));
    // Asked again with require: joined.
    let c = eo_job_cmd(&ds, Mode::Dynamic, Some("eo"), Ok(UnitRecords::One));
    assert_eq!(job_answer(apply(&mut s, c)).unwrap(), (eo_job, true));
    // An at-most-once job asked with require: refused, saying why.
    let amo = job(&mut s, &ds, Mode::Dynamic, Some("plain")).unwrap();
    assert!(!s.exactly_once.is_exactly_once(amo));
    let c = eo_job_cmd(&ds, Mode::Dynamic, Some("plain"), Ok(UnitRecords::One));
    let err = apply(&mut s, c).unwrap_err();
    assert!(matches!(err, StateError::FailedPrecondition(_)), "{err:?}");
    assert!(err.to_string().contains("job `plain` already exists with at-most-once"), "{err}");
    // Other identity conflicts are still the join's.
    let other = register(&mut s, DatasetDef::range(3));
    let err = apply(&mut s, eo_job_cmd(&other, Mode::Dynamic, Some("eo"), Ok(UnitRecords::One)));
    assert!(matches!(err, Err(StateError::InvalidArgument(_))), "{err:?}");
    // Coordinated jobs are never exactly-once.
    let coordinated = register(&mut s, DatasetDef::range(3).repeat_forever());
    off_job(&mut s, &coordinated, Some("rr"), false, Some(2)).unwrap();
    let c = eo_job_cmd(&coordinated, Mode::Off, Some("rr"), Ok(UnitRecords::One));
    assert!(matches!(apply(&mut s, c), Err(StateError::FailedPrecondition(_))));
}

#[test]
fn consumed_reports_advance_the_watermark_and_applying_one_twice_is_harmless() {
    let mut s = State::default();
    let (_, job) = eo_setup(&mut s, 10, UnitRecords::Counted);
    let (it, c) = iteration(&mut s, job, 1);
    report(&mut s, c, 0, &[(0, 0, 3), (2, 0, 1)], &[(0, 3)], &[]).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.consumed.watermark(), 1, "unit 0 is whole (3 of 3), unit 1 missing");
    assert!(p.consumed.contains(2, 0) && !p.consumed.contains(2, 1));
    let before = s.clone();
    report(&mut s, c, 0, &[(0, 0, 3), (2, 0, 1)], &[(0, 3)], &[]).unwrap();
    assert_eq!(s, before, "the same report again changes nothing");
    report(&mut s, c, 0, &[(1, 0, 1)], &[(1, 1), (2, 1)], &[]).unwrap();
    assert_eq!(s.exactly_once.iterations[&it].consumed.watermark(), 3);
}

#[test]
fn bad_reports_are_refused_and_change_nothing() {
    let mut s = State::default();
    let (ds, job) = eo_setup(&mut s, 10, UnitRecords::One);
    let (_, c) = iteration(&mut s, job, 1);
    let before = s.clone();
    let many: Vec<(u64, u64, u64)> = (0..65_537).map(|i| (i % 10, i, 1)).collect();
    let err = report(&mut s, c, 0, &many, &[], &[]).unwrap_err().to_string();
    assert!(err.contains("65537 runs") && err.contains("next heartbeat"), "{err}");
    let err = report(&mut s, c, 0, &[(10, 0, 1)], &[], &[]).unwrap_err().to_string();
    assert!(err.contains("unit 10") && err.contains("10 units"), "{err}");
    let err = report(&mut s, 999, 0, &[(1, 0, 1)], &[], &[]).unwrap_err();
    assert!(matches!(err, StateError::NotFound { .. }), "{err:?}");
    assert_eq!(s, before);
    // A consumer of an at-most-once iteration sends no reports.
    let plain = job_with_name(&mut s, &ds, "plain");
    let (_, pc) = iteration(&mut s, plain, 1);
    let err = report(&mut s, pc, 0, &[(1, 0, 1)], &[], &[]).unwrap_err();
    assert!(err.to_string().contains("not exactly-once"), "{err}");
}

/// docs/performance.md, "Exactly once": one-element units are reported as spans
/// of first records, applied as one entry each, with the same effect as one
/// run per unit.
#[test]
fn spans_of_first_records_count_as_a_run_per_unit() {
    let mut s = State::default();
    let (_, job) = eo_setup(&mut s, 10_000, UnitRecords::One);
    let (it, c) = iteration(&mut s, job, 1);
    let (_, c2) = iteration(&mut s, job, 1);
    report_spans(&mut s, c, 0, &[], &[(5_000, 4_000)]).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.consumed.watermark(), 0, "units 0..5000 are not consumed yet");
    assert_eq!(p.consumed.run_count(), 1, "4,000 units held as one span");
    // The same records as runs, from another consumer: nothing changes.
    let before = s.exactly_once.iterations[&it].consumed.clone();
    let runs: Vec<(u64, u64, u64)> = (5_000..9_000).map(|u| (u, 0, 1)).collect();
    report(&mut s, c2, 0, &runs, &[], &[]).unwrap();
    assert_eq!(s.exactly_once.iterations[&it].consumed, before);
    report_spans(&mut s, c2, 0, &[], &[(0, 5_000)]).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.consumed.watermark(), 9_000, "every unit below 9000 is whole");
    assert_eq!(p.checkpoint(0), (9_000, 0), "the generation's record has the spans too");
    let before = s.clone();
    report_spans(&mut s, c2, 0, &[], &[(0, 5_000)]).unwrap();
    assert_eq!(s, before, "applying a report twice is harmless");
}

#[test]
fn bad_spans_are_refused_and_change_nothing() {
    let mut s = State::default();
    let (_, job) = eo_setup(&mut s, 10, UnitRecords::One);
    let (_, c) = iteration(&mut s, job, 1);
    let before = s.clone();
    let err = report_spans(&mut s, c, 0, &[], &[(8, 3)]).unwrap_err().to_string();
    assert!(err.contains("unit 10") && err.contains("10 units"), "{err}");
    let err = report_spans(&mut s, c, 0, &[], &[(2, 0)]).unwrap_err().to_string();
    assert!(err.contains("invalid span") && err.contains("0 units from unit 2"), "{err}");
    let err = report_spans(&mut s, c, 0, &[], &[(u64::MAX, 2)]).unwrap_err();
    assert!(matches!(err, StateError::InvalidArgument(_)), "{err:?}");
    let many: Vec<(u64, u64)> = (0..65_537).map(|i| (i % 10, 1)).collect();
    let err = report_spans(&mut s, c, 0, &[], &many).unwrap_err().to_string();
    assert!(err.contains("65537 spans of first records"), "{err}");
    assert_eq!(s, before);
}

fn job_with_name(s: &mut State, ds: &str, name: &str) -> u64 {
    job(s, ds, Mode::Dynamic, Some(name)).unwrap()
}

/// docs/exactly-once.md, "Why a generation": a consumer's position of generation
/// g claims only units every record of which was reported with generation <= g.
#[test]
fn the_checkpoint_watermark_of_a_generation_ignores_later_consumption() {
    let mut s = State::default();
    let (_, job) = eo_setup(&mut s, 10, UnitRecords::One);
    let (it, c1) = iteration(&mut s, job, 1);
    let (_, c2) = iteration(&mut s, job, 1);
    // c1 has taken no position yet; c2 took its first (generation 0) already.
    report(&mut s, c1, 0, &[(0, 0, 1)], &[], &[]).unwrap();
    report(&mut s, c2, 1, &[(1, 0, 1)], &[], &[]).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.consumed.watermark(), 2);
    assert_eq!(p.checkpoint(0), (1, 0), "unit 1 was consumed after c2's position 0");
    assert_eq!(p.checkpoint(1), (2, 1));
    report(&mut s, c1, 0, &[(2, 0, 1)], &[], &[]).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.checkpoint(0), (1, 0), "still: unit 1 counts only from generation 1");
    assert_eq!(p.checkpoint(1), (3, 1), "a generation sees everything reported before it");
    assert_eq!(p.checkpoint(7), (3, 1), "a later generation reads the newest entry below it");
    // Once both consumers are at generation 1, generation 0 is folded away.
    report(&mut s, c1, 1, &[(3, 0, 1)], &[], &[]).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.generations.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(p.checkpoint(1), (4, 1));
    // A consumer leaving no longer holds the lowest generation.
    report(&mut s, c2, 3, &[(4, 0, 1)], &[], &[]).unwrap();
    apply(&mut s, Command::ReleaseClient { client_id: c1 }).unwrap();
    let p = &s.exactly_once.iterations[&it];
    assert_eq!(p.generations.keys().copied().collect::<Vec<_>>(), vec![3]);
    assert_eq!(p.checkpoint(3), (5, 3));
}
