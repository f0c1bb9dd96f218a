//! Pure tests of what a cross-trainer cache job requires (`apply`, no network).

use sluice_dataset::DatasetDef;
use sluice_dispatcher::{State, StateError};

mod common;
use common::{off_job, register};

fn job(s: &mut State, ds: &str, name: Option<&str>, cache: bool) -> Result<u64, StateError> {
    off_job(s, ds, name, cache, None)
}

fn invalid(r: Result<u64, StateError>) -> String {
    match r {
        Err(StateError::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn a_cache_job_needs_a_name_and_a_dataset_not_known_to_end_and_nothing_is_applied_otherwise() {
    let mut s = State::default();
    let finite = register(&mut s, DatasetDef::range(10).map("square"));
    let endless = register(&mut s, DatasetDef::range(10).repeat_forever());
    let before = s.clone();

    let m = invalid(job(&mut s, &endless, None, true));
    assert!(m.contains("needs a job name"), "{m}");
    let m = invalid(job(&mut s, &finite, Some("j"), true));
    assert!(m.contains("needs an infinite dataset") && m.contains("(10 elements)"), "{m}");
    assert!(m.contains(&format!("`{finite}`")), "names the dataset: {m}");
    assert_eq!(s, before, "a refused job leaves the state untouched");

    let id = job(&mut s, &endless, Some("j"), true).expect("an infinite named job");
    assert!(s.jobs[&id].cross_trainer_cache);
    assert_eq!(job(&mut s, &endless, Some("j"), true).unwrap(), id, "joined by name");
}

#[test]
fn the_cache_flag_is_part_of_a_named_jobs_identity() {
    let mut s = State::default();
    let endless = register(&mut s, DatasetDef::range(10).repeat_forever());
    job(&mut s, &endless, Some("plain"), false).unwrap();
    let m = invalid(job(&mut s, &endless, Some("plain"), true));
    assert!(
        m.contains("use_cross_trainer_cache=false") && m.contains("use_cross_trainer_cache=true"),
        "names both: {m}"
    );
    job(&mut s, &endless, Some("cached"), true).unwrap();
    let m = invalid(job(&mut s, &endless, Some("cached"), false));
    assert!(m.contains("use_cross_trainer_cache=true, but"), "{m}");
}
