//! `map` with `num_parallel_calls` > 1: the function runs on `threads` worker
//! threads (named `sluice-map`, started on the first `next`).
//!
//! ```text
//!   consumer thread                         sluice-map × threads
//!   input.next() ─▶ jobs (seq, element) ─▶ f(element) ─▶ results (seq, item)
//!        ▲                                                    │
//!        └── next() ◀── reorder buffer (deterministic) ◀──────┘
//! ```
//!
//! **The input is pulled on the consumer's thread**, inside `next`, not on a
//! feeder thread. The upstream (and the split provider it may lock) is then
//! touched by one thread as before; an input error has an exact position without
//! cross-thread bookkeeping; and one counter bounds everything. The cost: the
//! input is not produced while the consumer is busy elsewhere — put a `prefetch`
//! before the map for that, as with tf.data.
//!
//! **Bounds.** At most `2 * threads` elements are *in flight*: pulled from the
//! input and not yet yielded, whether queued for a worker, being mapped, waiting
//! in the result channel or in the reorder buffer. Both channels have that
//! capacity, so neither a `send` by the consumer nor by a worker ever blocks.
//!
//! **Order.** With `deterministic`, results are yielded in input order (a result
//! that arrives early waits in the reorder buffer); otherwise as they complete.
//! The first error — from the input or the function — ends the stage: in
//! deterministic mode at its input position; otherwise a function error as soon as
//! it arrives, an input error after the elements pulled before it. An *element*
//! error from the input (a bad record of an intact file, a failed Python call:
//! `DatasetError::is_element_error`) does not end it: it takes its place among the
//! results without going to a worker, and the input goes on, as through the
//! sequential `map` (so an `ignore_errors` after the map can skip it).
//!
//! **Shutdown.** Dropping the stage (or its end) sets a stop flag, closes both
//! channels and joins the workers: each finishes at most the call it is in. A
//! worker that cannot be spawned is skipped; if none can, the map runs inline.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::def::{Arg, FnCall};
use crate::error::DatasetError;
use crate::registry::KeyedMapFn;
use crate::tensor::Element;

use super::ops::{map_keeping_origin, Failure, Map};
use super::stream::{lock, ElementIter};

type Item = Result<Element, DatasetError>;
/// An element, its input position in this instantiation (for the reorder buffer)
/// and its index for the map's `ElementKey` (counted across instantiations).
type Job = (u64, u64, Element);

pub(super) struct ParallelMap {
    state: State,
}

enum State {
    NotStarted {
        input: ElementIter,
        call: FnCall,
        f: KeyedMapFn,
        taken: Arc<AtomicU64>,
        threads: usize,
        deterministic: bool,
        failure: Failure,
    },
    Running(Running),
    /// No worker thread could be started: the map runs on the caller's thread.
    Inline(Map),
    Done,
}

impl ParallelMap {
    /// `taken` counts the elements the stage has taken (the plan's, shared by its
    /// instantiations), as `ops::Map`'s does.
    pub(super) fn new(
        input: ElementIter,
        call: FnCall,
        f: KeyedMapFn,
        taken: Arc<AtomicU64>,
        threads: usize,
        deterministic: bool,
        failure: Failure,
    ) -> Self {
        let state = State::NotStarted { input, call, f, taken, threads, deterministic, failure };
        ParallelMap { state }
    }
}

impl Iterator for ParallelMap {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let State::NotStarted { .. } = self.state {
            if let State::NotStarted { input, call, f, taken, threads, deterministic, failure } =
                std::mem::replace(&mut self.state, State::Done)
            {
                let threads = threads.max(1);
                self.state = start(input, call, f, taken, threads, deterministic, failure);
            }
        }
        let item = match &mut self.state {
            State::Running(r) => r.next(),
            State::Inline(m) => m.next(),
            State::NotStarted { .. } | State::Done => None,
        };
        let goes_on = match &item {
            Some(Ok(_)) => true,
            Some(Err(e)) => e.is_element_error(),
            None => false,
        };
        if !goes_on {
            // Ends (and joins) the workers right away, not when the fuse drops us.
            self.state = State::Done;
        }
        item
    }
}

fn start(
    input: ElementIter,
    call: FnCall,
    f: KeyedMapFn,
    taken: Arc<AtomicU64>,
    threads: usize,
    deterministic: bool,
    failure: Failure,
) -> State {
    let cap = threads.saturating_mul(2);
    let (jobs_tx, jobs_rx) = sync_channel::<Job>(cap);
    let (results_tx, results_rx) = sync_channel::<(u64, Item)>(cap);
    let jobs_rx = Arc::new(Mutex::new(jobs_rx));
    let stop = Arc::new(AtomicBool::new(false));
    let args: Arc<[Arg]> = call.args.clone().into();
    let mut workers = Vec::with_capacity(threads);
    for _ in 0..threads {
        let worker = Worker {
            jobs: jobs_rx.clone(),
            results: results_tx.clone(),
            stop: stop.clone(),
            name: call.name.clone(),
            args: args.clone(),
            f: f.clone(),
            failure: failure.clone(),
        };
        match std::thread::Builder::new().name("sluice-map".into()).spawn(move || worker.run()) {
            Ok(handle) => workers.push(handle),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a map thread; using fewer");
                break;
            }
        }
    }
    if workers.is_empty() {
        return State::Inline(Map::new(input, call, f, taken, failure));
    }
    tracing::debug!(threads = workers.len(), deterministic, "parallel map started");
    State::Running(Running {
        input: Some(input),
        input_error: None,
        jobs: Some(jobs_tx),
        results: Some(results_rx),
        workers,
        stop,
        cap,
        taken,
        next_seq: 0,
        in_flight: 0,
        deterministic,
        reorder: VecDeque::new(),
        passed: VecDeque::new(),
    })
}

struct Worker {
    /// Shared by all workers; the lock is held only while waiting for one job.
    jobs: Arc<Mutex<Receiver<Job>>>,
    results: SyncSender<(u64, Item)>,
    stop: Arc<AtomicBool>,
    name: String,
    args: Arc<[Arg]>,
    f: KeyedMapFn,
    failure: Failure,
}

impl Worker {
    fn run(self) {
        loop {
            let job = lock(&self.jobs).recv();
            let Ok((seq, index, element)) = job else {
                return; // the consumer is gone
            };
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let (f, args) = (&self.f, &self.args[..]);
            let failure = &self.failure;
            let item =
                map_keeping_origin(&self.name, element, index, failure, |e, key| f(e, args, key));
            if self.results.send((seq, item)).is_err() {
                return;
            }
        }
    }
}

struct Running {
    /// `None` once the input has ended or failed.
    input: Option<ElementIter>,
    /// The input's error, yielded once everything pulled before it is out.
    input_error: Option<DatasetError>,
    jobs: Option<SyncSender<Job>>,
    results: Option<Receiver<(u64, Item)>>,
    workers: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    cap: usize,
    /// Elements the stage has taken over all its instantiations: the `ElementKey`
    /// index, drawn here on the consumer's thread, so in input order.
    taken: Arc<AtomicU64>,
    /// Position of the next element pulled from the input.
    next_seq: u64,
    /// Elements pulled and not yet yielded (≤ `cap`).
    in_flight: usize,
    deterministic: bool,
    /// Deterministic mode: results of positions `next_seq - in_flight ..`, in order.
    reorder: VecDeque<Option<Item>>,
    /// Nondeterministic mode: the input's element errors, yielded before waiting
    /// for a worker (counted in `in_flight` until then).
    passed: VecDeque<Item>,
}

impl Running {
    /// Pulls input elements and hands them to the workers until `cap` are in flight.
    fn fill(&mut self) -> Result<(), DatasetError> {
        while self.in_flight < self.cap {
            let Some(input) = self.input.as_mut() else {
                return Ok(());
            };
            let element = match input.next() {
                Some(Ok(e)) => e,
                Some(Err(e)) if e.is_element_error() => {
                    self.pass(e);
                    continue;
                }
                Some(Err(e)) => {
                    self.input_error = Some(e);
                    self.input = None;
                    return Ok(());
                }
                None => {
                    self.input = None;
                    return Ok(());
                }
            };
            let index = self.taken.fetch_add(1, Ordering::Relaxed);
            let job = (self.next_seq, index, element);
            let sent = self.jobs.as_ref().map(|jobs| jobs.send(job));
            if !matches!(sent, Some(Ok(()))) {
                return Err(workers_gone());
            }
            self.next_seq += 1;
            self.in_flight += 1;
        }
        Ok(())
    }

    /// Takes an element error of the input as the result of its position.
    fn pass(&mut self, e: DatasetError) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight += 1;
        if self.deterministic {
            self.place(seq, Err(e));
        } else {
            self.passed.push_back(Err(e));
        }
    }

    /// Deterministic mode: puts the result of position `seq` in the reorder
    /// buffer; `false` if `seq` is not in flight.
    fn place(&mut self, seq: u64, item: Item) -> bool {
        // The oldest in-flight position is `next_seq - in_flight`.
        let oldest = self.next_seq - self.in_flight as u64;
        let Some(slot) = seq.checked_sub(oldest).and_then(|i| usize::try_from(i).ok()) else {
            return false;
        };
        while self.reorder.len() <= slot {
            self.reorder.push_back(None);
        }
        if let Some(place) = self.reorder.get_mut(slot) {
            *place = Some(item);
        }
        true
    }

    fn next(&mut self) -> Option<Item> {
        if let Err(e) = self.fill() {
            return Some(Err(e));
        }
        loop {
            if let Some(item) = self.passed.pop_front() {
                self.in_flight -= 1;
                return Some(item);
            }
            if self.deterministic {
                if let Some(Some(_)) = self.reorder.front() {
                    self.in_flight -= 1;
                    return self.reorder.pop_front().flatten();
                }
            }
            if self.in_flight == 0 {
                return self.input_error.take().map(Err);
            }
            let received = self.results.as_ref().map(|r| r.recv());
            let Some(Ok((seq, item))) = received else {
                return Some(Err(workers_gone()));
            };
            if !self.deterministic {
                self.in_flight -= 1;
                return Some(item);
            }
            if !self.place(seq, item) {
                return Some(Err(workers_gone()));
            }
        }
    }
}

fn workers_gone() -> DatasetError {
    DatasetError::Unsupported("parallel map: the worker threads exited unexpectedly".into())
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing both channels wakes a worker waiting for a job and fails one
        // sending a result (which cannot block anyway: see the module doc).
        self.jobs = None;
        self.results = None;
        for worker in self.workers.drain(..) {
            if worker.join().is_err() {
                tracing::warn!("a map thread panicked outside the map function");
            }
        }
    }
}
