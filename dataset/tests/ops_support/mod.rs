//! Helpers for the `ops_*` tests: a deadlock watchdog, a live-thread counter, and
//! test functions registered on a copy of the built-in registry.
#![allow(dead_code)] // each test binary uses a different subset

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use sluice_dataset::{Arg, DatasetDef, DatasetError, Element, ElementIter, Stage, Tensor};

/// Runs `f` on its own thread and returns its result; fails the test instead of
/// hanging if `f` is still blocked after a minute. Only a guard against a
/// deadlock: no assertion depends on how long `f` takes.
pub fn watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: still blocked after 60 s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked (see above)"),
    }
}

/// Counts the threads that called [`LiveThreads::mark`] and have not exited yet:
/// the mark is a thread-local whose destructor runs when its thread exits, before
/// a `join` of that thread returns.
#[derive(Clone, Default)]
pub struct LiveThreads(Arc<AtomicUsize>);

struct Mark(Arc<AtomicUsize>);

impl Drop for Mark {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

thread_local! {
    static MARKS: RefCell<Vec<Mark>> = const { RefCell::new(Vec::new()) };
}

impl LiveThreads {
    /// Counts the calling thread (once) until it exits.
    pub fn mark(&self) {
        MARKS.with(|marks| {
            let mut marks = marks.borrow_mut();
            if !marks.iter().any(|m| Arc::ptr_eq(&m.0, &self.0)) {
                self.0.fetch_add(1, Ordering::SeqCst);
                marks.push(Mark(self.0.clone()));
            }
        });
    }
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

pub fn int_arg(args: &[Arg]) -> Result<i64, String> {
    match args {
        [Arg::Int(k)] => Ok(*k),
        _ => Err(format!("expected one int argument, got {args:?}")),
    }
}

pub fn int_of(e: &Element) -> Result<i64, String> {
    e.as_i64().map_err(|e| e.to_string())
}

pub fn scalar(v: i64) -> Element {
    Element::single(Tensor::scalar_i64(v))
}

/// A stream of int64 scalars.
pub fn stream(values: impl Iterator<Item = i64> + Send + 'static) -> ElementIter {
    Box::new(values.map(|v| Ok(scalar(v))))
}

/// Every item's int64 scalar, or the item's error.
pub fn values(items: &[Result<Element, DatasetError>]) -> Vec<Result<i64, DatasetError>> {
    items.iter().map(|r| r.clone().and_then(|e| e.as_i64())).collect()
}

/// `def` followed by an interleave with all its fields.
pub fn interleave(
    def: DatasetDef,
    name: &str,
    args: Vec<Arg>,
    (cycle_length, block_length): (u32, u32),
    num_parallel_calls: u32,
) -> DatasetDef {
    let mut def = def;
    def.stages.push(Stage::Interleave {
        name: name.to_string(),
        args,
        cycle_length,
        block_length,
        num_parallel_calls,
    });
    def
}

/// `def` followed by a map with all its fields.
pub fn map(
    def: DatasetDef,
    name: &str,
    args: Vec<Arg>,
    num_parallel_calls: u32,
    deterministic: bool,
) -> DatasetDef {
    let mut def = def;
    def.stages.push(Stage::Map { name: name.to_string(), args, num_parallel_calls, deterministic });
    def
}
