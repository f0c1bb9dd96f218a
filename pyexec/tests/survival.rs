//! The pool survives what user code does to its process: raising, aborting,
//! exiting, hanging in Python or in C, running out of memory. Only the element
//! that did it fails; the others and later calls go on.

mod common;

use std::time::Duration;

use common::*;
use sluice_dataset::{DatasetDef, Phase, PyOp};
use sluice_pyexec::Pool;

/// Runs `name` over 0..6 (element 3 misbehaves) and returns the failure of
/// element 3, checking that the other five came through.
fn only_three_fails(pool: &std::sync::Arc<Pool>, name: &str) -> sluice_dataset::PyFailure {
    let reg = registry(pool);
    let def = DatasetDef::range(6).python(stage(pool, PyOp::Map, by_ref(name)));
    let out = run(&def, &reg);
    assert_eq!(out.len(), 6, "{name}: {out:?}");
    let ok: Vec<i64> =
        out.iter().filter_map(|r| r.as_ref().ok()).map(|e| e.as_i64().unwrap()).collect();
    assert_eq!(ok, vec![100, 101, 102, 104, 105], "{name}");
    let f = failure(&out[3]);
    assert_eq!(f.phase, Phase::Call);
    // Later calls still work.
    let later = DatasetDef::range(5).python(stage(pool, PyOp::Map, by_ref("double")));
    assert_eq!(ints(&later, &reg), vec![0, 2, 4, 6, 8], "after {name}");
    f.failure.clone()
}

#[test]
fn a_process_that_aborts_is_restarted_and_only_its_element_fails() {
    let pool = pool(1);
    let f = only_three_fails(&pool, "abort_on_3");
    assert_eq!(f.error_type, "ProcessDied");
    assert!(f.message.contains("killed by signal 6 (SIGABRT)"), "{}", f.message);
    // faulthandler's dump of the Python stack is the traceback.
    assert!(f.traceback.contains("abort_on_3"), "{}", f.traceback);
    // Once for the call of six, once for element 3 alone.
    assert_eq!(pool.stats().restarts, 2);
}

#[test]
fn a_process_that_exits_is_restarted_and_only_its_element_fails() {
    let pool = pool(1);
    let f = only_three_fails(&pool, "exit_on_3");
    assert_eq!(f.error_type, "ProcessDied");
    assert!(f.message.contains("exited with status 3"), "{}", f.message);
}

#[test]
fn a_function_that_sleeps_past_the_limit_times_out_in_python() {
    let mut c = config(1);
    c.call_timeout = Duration::from_secs(1);
    let pool = std::sync::Arc::new(Pool::start(c).unwrap());
    let f = only_three_fails(&pool, "sleep_on_3");
    assert_eq!(f.error_type, "TimeoutError");
    assert!(f.message.contains("limit of 1 s"), "{}", f.message);
    assert!(f.traceback.contains("sleep_on_3"), "{}", f.traceback);
    assert_eq!(pool.stats().restarts, 0, "Python's own limit needs no kill");
    // The limit is per element, not per call: four elements of 0.4 s in one call
    // of 1.6 s all pass.
    let slow = pickle("import time\ndef f(x):\n    time.sleep(0.4)\n    return x\n");
    let def = DatasetDef::range(4).python(stage(&pool, PyOp::Map, slow));
    assert_eq!(ints(&def, &registry(&pool)), vec![0, 1, 2, 3]);
    // A flat_map generator runs under the limit too.
    let reg = registry(&pool);
    let out =
        run(&DatasetDef::range(1).python(stage(&pool, PyOp::FlatMap, by_ref("endless"))), &reg);
    assert_eq!(failure(&out[0]).failure.error_type, "TimeoutError");
}

#[test]
fn a_function_stuck_in_c_is_killed_at_the_hard_deadline() {
    let mut c = config(1);
    c.call_timeout = Duration::from_secs(1);
    let pool = std::sync::Arc::new(Pool::start(c).unwrap());
    let f = only_three_fails(&pool, "c_hang_on_3");
    assert_eq!(f.error_type, "Timeout");
    assert!(f.message.contains("did not answer within"), "{}", f.message);
    assert_eq!(pool.stats().restarts, 2);
}

#[test]
fn retries_give_a_crashed_element_one_more_process() {
    let pool = pool(1);
    let reg = registry(&pool);
    // The function crashes the first process it runs on for each element: a file
    // per element marks "already crashed once".
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "import os\ndef f(x):\n    mark = os.path.join({:?}, str(int(x)))\n    \
         if not os.path.exists(mark):\n        open(mark, 'w').close()\n        os._exit(9)\n    \
         return x + 1\n",
        dir.path().display().to_string()
    );
    let mut st = stage(&pool, PyOp::Map, pickle(&source));
    st.retries = 1;
    assert_eq!(ints(&DatasetDef::range(3).python(st.clone()), &reg), vec![1, 2, 3]);
    // Without retries, an element that crashes its (lone) attempt fails.
    st.retries = 0;
    let out = run(&DatasetDef::range(3).skip(2).map("square").python(st), &reg);
    assert_eq!(failure(&out[0]).failure.error_type, "ProcessDied");
}

#[test]
fn the_memory_limit_turns_a_blow_up_into_memory_error() {
    let mut c = config(1);
    c.memory_limit_bytes = Some(1 << 30);
    let pool = std::sync::Arc::new(Pool::start(c).unwrap());
    let reg = registry(&pool);
    let def = DatasetDef::range(1).python(stage(&pool, PyOp::Map, by_ref("allocate_a_lot")));
    let out = run(&def, &reg);
    let f = failure(&out[0]);
    assert_eq!(f.failure.error_type, "MemoryError", "{f:?}");
    assert!(f.failure.traceback.contains("allocate_a_lot"));
    assert_eq!(pool.stats().restarts, 0);
}

#[test]
fn a_garbled_answer_is_refused_and_the_process_replaced() {
    let pool = pool(1);
    let reg = registry(&pool);
    // The function writes a frame header claiming 2 GiB onto the protocol pipe.
    let f = pickle(
        "import os, __main__\ndef f(x):\n    if x == 1:\n        \
         os.write(__main__.PROTO_OUT, b'\\xff\\xff\\xff\\x7f')\n        os.abort()\n    return x\n",
    );
    let out = run(&DatasetDef::range(3).python(stage(&pool, PyOp::Map, f)), &reg);
    let f = failure(&out[1]);
    assert_eq!(f.failure.error_type, "BadOutput");
    assert!(f.failure.message.contains("malformed answer"), "{}", f.failure.message);
    assert_eq!(out[0].as_ref().unwrap().as_i64().unwrap(), 0);
    assert_eq!(out[2].as_ref().unwrap().as_i64().unwrap(), 2);
}

#[test]
fn a_crash_is_seen_at_once_and_kills_what_the_function_forked() {
    let marks = tempfile::tempdir().unwrap();
    let mut c = config(1);
    c.call_timeout = Duration::from_secs(20);
    c.env.push(("SLUICE_TEST_MARKS".into(), marks.path().display().to_string()));
    let pool = std::sync::Arc::new(Pool::start(c).unwrap());
    // A forked child holding the answer pipe would hide the crash until the hard
    // deadline (then a `Timeout`): the runner closes the pipes in forked children.
    let f = only_three_fails(&pool, "fork_then_abort_on_3");
    assert_eq!(f.error_type, "ProcessDied", "{f:?}");
    let forked: Vec<u32> = std::fs::read_dir(marks.path())
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    assert_eq!(forked.len(), 2, "one child per crash (the call, then element 3 alone)");
    sluice_testkit::wait_blocking("the forked children to die with their process group", || {
        forked.iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        })
    });
}
