//! `interleave` and `flat_map`: tf.data's order against hand-computed outputs, the
//! same order for every `num_parallel_calls`, errors in position, streams read at
//! the same time, and the producer threads joined when the stage ends or is dropped.

mod common;
mod ops_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use common::run_with;
use ops_support::{int_arg, int_of, interleave, stream, values, watchdog, LiveThreads};
use sluice_dataset::{Arg, DatasetDef, DatasetError, FunctionRegistry};

/// The built-ins plus these dataset functions of an int64 scalar `n`:
/// `repeat_const(k)`: `n` k times; `range_of`: `0..n`; `fail_open_at(k)`: `0..n`,
/// but `n == k` fails to open; `fail_inside_at(k)`: `0..n`, then an error if
/// `n == k`; `panic_inside_at(k)`: likewise with a panic; and the map
/// `fail_at(k)`: identity, but an error on `k`.
fn registry() -> FunctionRegistry {
    let mut r = FunctionRegistry::builtin();
    r.register_dataset_fn("repeat_const", 1, |e, args| {
        let (n, k) = (int_of(&e)?, int_arg(args)?);
        Ok(stream((0..k).map(move |_| n)))
    });
    r.register_dataset_fn("range_of", 0, |e, _| Ok(stream(0..int_of(&e)?)));
    r.register_dataset_fn("fail_open_at", 1, |e, args| {
        let n = int_of(&e)?;
        if n == int_arg(args)? {
            return Err(format!("cannot open {n}"));
        }
        Ok(stream(0..n))
    });
    r.register_dataset_fn("fail_inside_at", 1, |e, args| {
        let (n, k) = (int_of(&e)?, int_arg(args)?);
        let tail = (n == k).then(|| {
            Err(DatasetError::Function { name: "inner".into(), message: format!("{n} broke") })
        });
        Ok(Box::new((0..n).map(|v| Ok(ops_support::scalar(v))).chain(tail)))
    });
    r.register_dataset_fn("panic_inside_at", 1, |e, args| {
        let (n, k) = (int_of(&e)?, int_arg(args)?);
        Ok(Box::new((0..=n).filter_map(move |v| {
            if v < n {
                return Some(Ok(ops_support::scalar(v)));
            }
            assert!(n != k, "inner stream {n} panics");
            None
        })))
    });
    r.register_map("fail_at", 1, |e, args| {
        if int_of(&e)? == int_arg(args)? {
            return Err("input broke".into());
        }
        Ok(e)
    });
    r
}

fn run_ints(def: &DatasetDef, r: &FunctionRegistry) -> Vec<i64> {
    values(&run_with(def, r)).into_iter().map(|v| v.expect("no error")).collect()
}

/// The example of tf.data's `interleave` documentation.
#[test]
fn interleave_matches_the_tf_data_documentation_example() {
    let want = vec![
        1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5,
    ];
    let r = registry();
    for parallelism in [1, 2, 4, 0] {
        let def = interleave(
            DatasetDef::range_with(1, 6, 1),
            "repeat_const",
            vec![Arg::Int(6)],
            (2, 4),
            parallelism,
        );
        assert_eq!(run_ints(&def, &r), want, "num_parallel_calls {parallelism}");
    }
}

/// Inputs 1..=4 → streams [0], [0,1], [0,1,2], [0,1,2,3]; cycle 3, block 2:
/// slot 0: 0 (ends) · slot 1: 0 1 · slot 2: 0 1 · slot 0 (now 4): 0 1 ·
/// slot 1: ends · slot 2: 2 (ends) · slot 0: 2 3.
#[test]
fn interleave_with_uneven_streams_refills_the_slot_that_ended() {
    let r = registry();
    for parallelism in [1, 2, 3, 4] {
        let def =
            interleave(DatasetDef::range_with(1, 5, 1), "range_of", vec![], (3, 2), parallelism);
        assert_eq!(run_ints(&def, &r), vec![0, 0, 1, 0, 1, 0, 1, 2, 2, 3], "{parallelism}");
    }
}

/// Empty streams (input 0, 3) are skipped without ending the round early.
#[test]
fn interleave_skips_empty_streams() {
    let r = registry();
    let input = DatasetDef::from_ints(vec![2, 0, 3, 0, 1]);
    // cycle 2, block 1: slot0 ← 2: 0 · slot1 ← 0: ends · slot0: 1 · slot1 ← 3: 0 ·
    // slot0: ends · slot1: 1 · slot0 ← 0: ends · slot1: 2 · slot0 ← 1: 0 · both end.
    for parallelism in [1, 2] {
        let def = interleave(input.clone(), "range_of", vec![], (2, 1), parallelism);
        assert_eq!(run_ints(&def, &r), vec![0, 1, 0, 1, 2, 0], "{parallelism}");
    }
}

#[test]
fn interleave_order_does_not_depend_on_parallelism() {
    let r = registry();
    let input = DatasetDef::from_ints(vec![3, 0, 7, 1, 5, 2, 0, 4, 6, 1, 3, 8]);
    let total: i64 = 3 + 7 + 1 + 5 + 2 + 4 + 6 + 1 + 3 + 8;
    for cycle in 1..=5 {
        for block in 1..=4 {
            let oracle =
                run_ints(&interleave(input.clone(), "range_of", vec![], (cycle, block), 1), &r);
            assert_eq!(oracle.len() as i64, total);
            for parallelism in [2, 3, 4, 7] {
                let def =
                    interleave(input.clone(), "range_of", vec![], (cycle, block), parallelism);
                assert_eq!(
                    run_ints(&def, &r),
                    oracle,
                    "cycle {cycle} block {block} p {parallelism}"
                );
            }
        }
    }
}

#[test]
fn flat_map_concatenates_the_streams_in_input_order() {
    let r = registry();
    let def = DatasetDef::range(4).flat_map("range_of", vec![]);
    assert_eq!(run_ints(&def, &r), vec![0, 0, 1, 0, 1, 2]);
    let same = interleave(DatasetDef::range(4), "range_of", vec![], (1, 1), 1);
    assert_eq!(run_ints(&same, &r), vec![0, 0, 1, 0, 1, 2]);
    let def = DatasetDef::range_with(1, 4, 1).flat_map("repeat_const", vec![Arg::Int(2)]);
    assert_eq!(run_ints(&def, &r), vec![1, 1, 2, 2, 3, 3]);
}

#[test]
fn interleave_inside_repeat_restarts_each_epoch() {
    let r = registry();
    let once = vec![0, 0, 1, 0, 1, 0, 1, 2, 2, 3];
    for parallelism in [1, 4] {
        let def =
            interleave(DatasetDef::range_with(1, 5, 1), "range_of", vec![], (3, 2), parallelism)
                .repeat(2);
        assert_eq!(run_ints(&def, &r), [once.clone(), once.clone()].concat());
        let def =
            interleave(DatasetDef::range_with(1, 5, 1), "range_of", vec![], (3, 2), parallelism)
                .repeat_forever()
                .take(15);
        assert_eq!(run_ints(&def, &r), [once.clone(), once[..5].to_vec()].concat());
    }
}

/// Errors while opening a stream, inside a stream, from a panicking stream and
/// from the input: each yielded where the sequential interleave yields it, then
/// the end, for every parallelism.
#[test]
fn errors_are_yielded_in_position_and_end_the_stage() {
    let r = registry();
    let input = || DatasetDef::range_with(1, 8, 1);
    let cases = [
        (interleave(input(), "fail_open_at", vec![Arg::Int(4)], (2, 2), 1), "fail_open_at"),
        (interleave(input(), "fail_inside_at", vec![Arg::Int(3)], (3, 1), 1), "inner"),
        (interleave(input(), "panic_inside_at", vec![Arg::Int(2)], (2, 1), 1), "panic_inside_at"),
        (
            interleave(
                input().map_with("fail_at", vec![Arg::Int(5)]),
                "range_of",
                vec![],
                (2, 3),
                1,
            ),
            "fail_at",
        ),
    ];
    for (def, failing) in cases {
        let oracle = values(&run_with(&def, &r));
        let (last, oks) = oracle.split_last().expect("some output");
        assert!(
            matches!(last, Err(DatasetError::Function { name, .. }) if name == failing),
            "{failing}: {last:?}"
        );
        assert!(oks.iter().all(Result::is_ok), "{failing}: {oracle:?}");
        for parallelism in [2, 4] {
            let mut def = def.clone();
            if let Some(sluice_dataset::Stage::Interleave { num_parallel_calls, .. }) =
                def.stages.last_mut()
            {
                *num_parallel_calls = parallelism;
            }
            assert_eq!(values(&run_with(&def, &r)), oracle, "{failing} p {parallelism}");
        }
    }
    // Hand-computed for the first case: cycle 2 block 2 over 1..: slot0=1: 0 (ends)
    // · slot1=2: 0 1 · slot0=3: 0 1 · slot1 (2 ended) · slot0: 2 · slot1=4: error.
    let first =
        values(&run_with(&interleave(input(), "fail_open_at", vec![Arg::Int(4)], (2, 2), 4), &r));
    assert_eq!(first[..6], [Ok(0), Ok(0), Ok(1), Ok(0), Ok(1), Ok(2)]);
    assert_eq!(first.len(), 7);
}

/// Every stream waits at a barrier for all `cycle_length` streams before its
/// first element: only streams read at the same time can pass it (read one at a
/// time they would block forever and the watchdog fails the test).
#[test]
fn parallel_interleave_reads_its_streams_at_the_same_time() {
    let barrier = Arc::new(Barrier::new(4));
    let mut r = registry();
    r.register_dataset_fn("meet_then_range", 0, move |e, _| {
        let n = int_of(&e)?;
        let barrier = barrier.clone();
        let mut met = false;
        Ok(Box::new((0..n).map(move |v| {
            if !met {
                barrier.wait();
                met = true;
            }
            Ok(ops_support::scalar(v))
        })))
    });
    let def = interleave(DatasetDef::range_with(1, 5, 1), "meet_then_range", vec![], (4, 1), 4);
    let got = watchdog("barrier interleave", move || run_ints(&def, &r));
    assert_eq!(got, vec![0, 0, 0, 0, 1, 1, 1, 2, 2, 3]);
}

/// A registry whose `endless` streams (n, n, n, …) count themselves alive in
/// `streams` and mark the threads reading them in `threads`.
fn endless_registry(streams: &Arc<AtomicUsize>, threads: &LiveThreads) -> FunctionRegistry {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let (streams, threads) = (streams.clone(), threads.clone());
    let mut r = registry();
    r.register_dataset_fn("endless", 0, move |e, _| {
        let n = int_of(&e)?;
        streams.fetch_add(1, Ordering::SeqCst);
        let counted = Counted(streams.clone());
        let threads = threads.clone();
        Ok(Box::new(std::iter::repeat_with(move || {
            let _ = &counted;
            threads.mark();
            Ok(ops_support::scalar(n))
        })))
    });
    r
}

/// The producers are blocked sending into full channels when the consumer goes
/// away: the drop must return, after every producer thread has exited and every
/// stream has been dropped.
#[test]
fn dropping_a_parallel_interleave_joins_its_producers() {
    let streams = Arc::new(AtomicUsize::new(0));
    let threads = LiveThreads::default();
    let r = endless_registry(&streams, &threads);
    let def = interleave(DatasetDef::range(100), "endless", vec![], (4, 2), 4);
    let (s, t) = (streams.clone(), threads.clone());
    watchdog("drop interleave", move || {
        let mut it = def.iter_local(&r).expect("valid");
        let first = values(&it.by_ref().take(10).collect::<Vec<_>>());
        assert_eq!(first, [0, 0, 1, 1, 2, 2, 3, 3, 0, 0].map(Ok));
        assert_eq!(s.load(Ordering::SeqCst), 4, "one stream per slot");
        assert!(t.count() >= 1);
        drop(it);
        assert_eq!(s.load(Ordering::SeqCst), 0, "every stream dropped");
        assert_eq!(t.count(), 0, "every producer thread exited");
    });
}

#[test]
fn a_finished_interleave_has_joined_its_producers() {
    let threads = LiveThreads::default();
    let mut r = registry();
    let marks = threads.clone();
    r.register_dataset_fn("marked_range", 0, move |e, _| {
        marks.mark();
        Ok(stream(0..int_of(&e)?))
    });
    let def = interleave(DatasetDef::range(20), "marked_range", vec![], (3, 2), 3);
    let mut it = def.iter_local(&r).expect("valid");
    let n = it.by_ref().inspect(|x| assert!(x.is_ok(), "{x:?}")).count();
    assert_eq!(n, (0..20).sum::<usize>());
    assert_eq!(threads.count(), 0);
    drop(it);
}

/// Producer threads outlive the streams they read (`interleave_pool`): twenty
/// streams through three slots are read by at most three threads, not a
/// thread per stream, so a thread's allocator heaps stay warm from file to file.
#[test]
fn a_parallel_interleave_reads_stream_after_stream_on_the_same_threads() {
    let ids = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let mut r = registry();
    let seen = ids.clone();
    r.register_dataset_fn("range_noting_thread", 0, move |e, _| {
        seen.lock().unwrap().insert(std::thread::current().id());
        Ok(stream(0..int_of(&e)?))
    });
    let def = interleave(DatasetDef::range(20), "range_noting_thread", vec![], (3, 2), 3);
    let got = watchdog("pooled interleave", move || run_ints(&def, &r));
    assert_eq!(got.len(), (0..20).sum::<usize>());
    let consumer = std::thread::current().id();
    let ids = ids.lock().unwrap();
    assert!(!ids.contains(&consumer), "every stream was read by a producer thread");
    assert!(ids.len() <= 3, "{} threads read 20 streams", ids.len());
}

#[test]
fn interleave_and_flat_map_json_parse_and_run() {
    let r = registry();
    let json = r#"{"stages": [
        {"range": {"start": 1, "stop": 6}},
        {"interleave": {"fn": "repeat_const", "args": [6], "cycle_length": 2, "block_length": 4,
                        "num_parallel_calls": 2}}
    ]}"#;
    let def = DatasetDef::from_json(json).expect("parses");
    assert_eq!(DatasetDef::from_json(&def.to_json()).expect("round trip"), def);
    assert_eq!(run_ints(&def, &r)[..10], [1, 1, 1, 1, 2, 2, 2, 2, 1, 1]);
    let json = r#"{"stages": [{"range": {"stop": 4}}, {"flat_map": {"fn": "range_of"}}]}"#;
    let def = DatasetDef::from_json(json).expect("parses");
    assert_eq!(DatasetDef::from_json(&def.to_json()).expect("round trip"), def);
    assert_eq!(run_ints(&def, &r), vec![0, 0, 1, 0, 1, 2]);
}

/// tf.data's sequential interleave as written there: a slot is opened when the
/// round reaches it empty. The executor opens slots eagerly instead; this checks
/// that both give the same order on many uneven inputs (streams `0..n`).
fn lazy_reference(input: &[i64], cycle: usize, block: usize) -> Vec<i64> {
    let mut input = input.iter();
    let mut slots: Vec<Option<std::ops::Range<i64>>> = vec![None; cycle];
    let (mut index, mut in_block, mut open, mut input_done) = (0, 0, 0, false);
    let mut out = Vec::new();
    let advance = |index: &mut usize, in_block: &mut usize| {
        *in_block = 0;
        *index = (*index + 1) % cycle;
    };
    while !input_done || open > 0 {
        match &mut slots[index] {
            Some(stream) => match stream.next() {
                Some(v) => {
                    out.push(v);
                    in_block += 1;
                    if in_block == block {
                        advance(&mut index, &mut in_block);
                    }
                }
                None => {
                    slots[index] = None;
                    open -= 1;
                    advance(&mut index, &mut in_block);
                }
            },
            None if !input_done => match input.next() {
                Some(n) => {
                    slots[index] = Some(0..*n);
                    open += 1;
                }
                None => input_done = true,
            },
            None => advance(&mut index, &mut in_block),
        }
    }
    out
}

#[test]
fn eager_opening_gives_tf_data_lazy_order() {
    let r = registry();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |m: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % m
    };
    for _ in 0..200 {
        let len = next(12) as usize;
        let input: Vec<i64> = (0..len).map(|_| next(6) as i64).collect();
        let (cycle, block) = (1 + next(4) as u32, 1 + next(3) as u32);
        let want = lazy_reference(&input, cycle as usize, block as usize);
        for parallelism in [1, 3] {
            let def = DatasetDef::from_ints(input.clone());
            let def = interleave(def, "range_of", vec![], (cycle, block), parallelism);
            assert_eq!(run_ints(&def, &r), want, "{input:?} cycle {cycle} block {block}");
        }
    }
}
