//! `prefetch`: order, error pass-through, and the thread stopping with its consumer.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ints, run_with};
use sluice_dataset::{Arg, DatasetDef, DatasetError, FunctionRegistry};

#[test]
fn prefetch_preserves_order() {
    let want: Vec<i64> = (0..1000).collect();
    assert_eq!(ints(&DatasetDef::range(1000).prefetch(1)), want);
    assert_eq!(ints(&DatasetDef::range(1000).prefetch(16)), want);
    assert_eq!(ints(&DatasetDef::range(100).prefetch(4).map("identity").prefetch(2)), want[..100]);
}

#[test]
fn prefetch_passes_errors_through_and_stops() {
    let def = DatasetDef::range(5).map_with("add", vec![Arg::Str("x".into())]).prefetch(3);
    let out = run_with(&def, &FunctionRegistry::builtin());
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0], Err(DatasetError::Function { name, .. }) if name == "add"));
}

#[test]
fn prefetch_with_a_huge_buffer_does_not_allocate_it() {
    assert_eq!(ints(&DatasetDef::range(3).prefetch(u64::MAX)), vec![0, 1, 2]);
}

/// The registry's functions are held by the pipeline (and so by the prefetch
/// thread); once the consumer is dropped and the thread exits, `token` is free again.
#[test]
fn prefetch_thread_exits_when_the_consumer_is_dropped() {
    let token = Arc::new(());
    let held = token.clone();
    let mut registry = FunctionRegistry::builtin();
    registry.register_map("hold", 0, move |e, _| {
        let _ = &held;
        Ok(e)
    });
    let def = DatasetDef::range(10).repeat_forever().map("hold").prefetch(2);
    let mut it = def.iter_local(&registry).expect("valid");
    drop(registry);
    let first: Vec<i64> =
        it.by_ref().take(3).map(|r| r.expect("ok").as_i64().expect("int")).collect();
    assert_eq!(first, vec![0, 1, 2]);
    assert!(Arc::strong_count(&token) > 1, "the running pipeline holds the function");

    drop(it);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&token) > 1 {
        assert!(Instant::now() < deadline, "the prefetch thread did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
}
