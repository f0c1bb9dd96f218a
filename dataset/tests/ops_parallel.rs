//! `map` with `num_parallel_calls` > 1: the sequential map is the oracle; the
//! calls really run at once (a barrier only several threads can pass); errors in
//! position; the worker threads joined when the stage ends or is dropped.

mod common;
mod ops_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use common::{ints, run, run_with};
use ops_support::{int_arg, int_of, map, values, watchdog, LiveThreads};
use sluice_dataset::{Arg, DatasetDef, DatasetError, FunctionRegistry};

/// The built-ins plus `fail_at(k)` (identity, but an error on `k`), `panic_at(k)`
/// and `mark` (identity, counting the threads it runs on in `live`).
fn registry(live: &LiveThreads) -> FunctionRegistry {
    let mut r = FunctionRegistry::builtin();
    r.register_map("fail_at", 1, |e, args| {
        if int_of(&e)? == int_arg(args)? {
            return Err(format!("fails on {}", int_arg(args)?));
        }
        Ok(e)
    });
    r.register_map("panic_at", 1, |e, args| {
        if int_of(&e)? == int_arg(args)? {
            panic!("boom");
        }
        Ok(e)
    });
    let live = live.clone();
    r.register_map("mark", 0, move |e, _| {
        live.mark();
        Ok(e)
    });
    r
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

#[test]
fn parallel_map_equals_the_sequential_map() {
    let want = ints(&DatasetDef::range(1000).map("square"));
    for threads in [0, 2, 3, 4, 8] {
        let got = ints(&DatasetDef::range(1000).parallel_map("square", vec![], threads));
        assert_eq!(got, want, "{threads} threads");
    }
    let chained = DatasetDef::range(300)
        .parallel_map("add", vec![Arg::Int(1)], 3)
        .filter_with("mod_eq", vec![Arg::Int(3), Arg::Int(0)])
        .parallel_map("square", vec![], 2)
        .batch(7, false)
        .repeat(2);
    let oracle = DatasetDef::range(300)
        .map_with("add", vec![Arg::Int(1)])
        .filter_with("mod_eq", vec![Arg::Int(3), Arg::Int(0)])
        .map("square")
        .batch(7, false)
        .repeat(2);
    assert_eq!(common::json(&chained), common::json(&oracle));
}

#[test]
fn nondeterministic_parallel_map_yields_a_permutation() {
    let want: Vec<i64> = (0..1000).map(|x| x * x).collect();
    for threads in [2, 4] {
        let got = ints(&map(DatasetDef::range(1000), "square", vec![], threads, false));
        assert_eq!(sorted(got), want, "{threads} threads");
    }
}

/// Each call waits at a barrier for `threads` calls: a map running the calls one
/// at a time would never pass it (the watchdog then fails the test).
#[test]
fn parallel_map_runs_its_calls_at_the_same_time() {
    for (threads, deterministic) in [(4, true), (4, false), (2, true)] {
        let barrier = Arc::new(Barrier::new(threads as usize));
        let mut r = FunctionRegistry::builtin();
        r.register_map("meet", 0, move |e, _| {
            barrier.wait();
            Ok(e)
        });
        let def = map(DatasetDef::range(400), "meet", vec![], threads, deterministic);
        let got = watchdog("barrier map", move || {
            run_with(&def, &r).into_iter().map(|x| x.and_then(|e| e.as_i64())).collect::<Vec<_>>()
        });
        let got: Vec<i64> = got.into_iter().collect::<Result<_, _>>().expect("no error");
        if deterministic {
            assert_eq!(got, (0..400).collect::<Vec<_>>());
        } else {
            assert_eq!(sorted(got), (0..400).collect::<Vec<_>>());
        }
    }
}

#[test]
fn a_function_error_is_yielded_in_position_and_ends_the_stage() {
    let r = registry(&LiveThreads::default());
    let def = DatasetDef::range(100).parallel_map("fail_at", vec![Arg::Int(37)], 4);
    let out = values(&run_with(&def, &r));
    assert_eq!(out.len(), 38);
    assert_eq!(out[..37], (0..37).map(Ok).collect::<Vec<_>>()[..]);
    assert!(matches!(&out[37], Err(DatasetError::Function { name, .. }) if name == "fail_at"));
}

#[test]
fn an_input_error_is_yielded_in_position_and_ends_the_stage() {
    let r = registry(&LiveThreads::default());
    let def = DatasetDef::range(100).map_with("fail_at", vec![Arg::Int(37)]).parallel_map(
        "square",
        vec![],
        4,
    );
    let out = values(&run_with(&def, &r));
    assert_eq!(out.len(), 38);
    assert_eq!(out[..37], (0..37).map(|x| Ok(x * x)).collect::<Vec<_>>()[..]);
    assert!(matches!(&out[37], Err(DatasetError::Function { name, .. }) if name == "fail_at"));
}

#[test]
fn a_nondeterministic_map_ends_at_its_first_error() {
    let r = registry(&LiveThreads::default());
    let def = map(DatasetDef::range(100), "fail_at", vec![Arg::Int(37)], 4, false);
    let out = values(&run_with(&def, &r));
    let (last, oks) = out.split_last().expect("some output");
    assert!(matches!(last, Err(DatasetError::Function { .. })), "{last:?}");
    let oks: Vec<i64> = oks.iter().map(|r| r.clone().expect("only the last fails")).collect();
    let distinct: BTreeSet<i64> = oks.iter().copied().collect();
    assert_eq!(distinct.len(), oks.len());
    assert!(oks.iter().all(|x| (0..100).contains(x) && *x != 37));
}

#[test]
fn a_panicking_function_becomes_an_error() {
    let r = registry(&LiveThreads::default());
    let def = DatasetDef::range(10).parallel_map("panic_at", vec![Arg::Int(3)], 2);
    let out = values(&run_with(&def, &r));
    assert_eq!(out[..3], [Ok(0), Ok(1), Ok(2)]);
    assert!(
        matches!(&out[3], Err(DatasetError::Function { message, .. }) if message.contains("boom")),
        "{:?}",
        out[3]
    );
    assert_eq!(out.len(), 4);
}

/// The results channel is full (nobody reads) when the consumer goes away; the
/// drop must still return, and only after every worker thread has exited.
#[test]
fn dropping_a_parallel_map_mid_stream_joins_its_threads() {
    for deterministic in [true, false] {
        let live = LiveThreads::default();
        let r = registry(&live);
        let def = map(DatasetDef::range(1_000_000), "mark", vec![], 4, deterministic);
        let seen = live.clone();
        watchdog("drop mid-stream", move || {
            let mut it = def.iter_local(&r).expect("valid");
            let first: Vec<_> = it.by_ref().take(5).collect();
            assert_eq!(first.len(), 5);
            assert!(seen.count() >= 1, "a worker ran the function");
            drop(it);
            assert_eq!(seen.count(), 0, "every worker thread has exited");
        });
        assert_eq!(live.count(), 0);
    }
}

#[test]
fn a_finished_parallel_map_has_joined_its_threads_before_it_is_dropped() {
    let live = LiveThreads::default();
    let r = registry(&live);
    let def = DatasetDef::range(50).parallel_map("mark", vec![], 4);
    let mut it = def.iter_local(&r).expect("valid");
    let n = it.by_ref().inspect(|x| assert!(x.is_ok(), "{x:?}")).count();
    assert_eq!(n, 50);
    assert_eq!(live.count(), 0, "threads exit at the end, not at the drop");
    drop(it);
}

#[test]
fn parallel_map_under_repeat_and_take() {
    let def = DatasetDef::range(10).parallel_map("square", vec![], 3).repeat(3).take(25);
    let want: Vec<i64> = (0..3).flat_map(|_| (0..10).map(|x| x * x)).take(25).collect();
    assert_eq!(ints(&def), want);
    assert_eq!(run(&DatasetDef::range(0).parallel_map("square", vec![], 4)).len(), 0);
}

#[test]
fn parallel_map_json_parses_and_runs() {
    let json = r#"{"stages": [
        {"range": {"stop": 20}},
        {"map": {"fn": "square", "num_parallel_calls": 4, "deterministic": false}}
    ]}"#;
    let def = DatasetDef::from_json(json).expect("parses");
    assert_eq!(DatasetDef::from_json(&def.to_json()).expect("round trip"), def);
    assert_eq!(sorted(ints(&def)), (0..20).map(|x| x * x).collect::<Vec<_>>());
}
