//! The Python stage: sends its input, a chunk at a time, to the registry's
//! [`PythonExecutor`] (a worker's pool of Python processes) and yields what comes
//! back.
//!
//! Why chunks: a call crosses a pipe to another process; one element per call
//! would pay that crossing per element. `map`, `filter` and `flat_map` send up to
//! [`CHUNK_ELEMENTS`] elements (or [`CHUNK_BYTES`]) per call, `map_batches` one
//! stacked batch. Up to `num_parallel_calls` calls are in flight; with
//! `deterministic` the results come out in input order, otherwise as they complete.
//!
//! Failures: an element the function failed on becomes a `UserFunction` element
//! error in its place (the stage goes on; `ignore_errors` may skip it); a function
//! that cannot be loaded (checked once, before the first call) ends the stage.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use sluice_positions::Tag;

use crate::error::DatasetError;
use crate::python::{
    Phase, PyCall, PyFailure, PyFunction, PyOp, PyOutcome, PyReply, PyResponse, PythonStage,
    SharedPythonExecutor, UserFunctionFailure,
};
use crate::tensor::Element;

use super::batch::stack;
use super::slices::Slicer;
use super::stream::ElementIter;
use super::tagging::Dropped;

type Item = Result<Element, DatasetError>;

/// Elements per call of `map`, `filter`, `flat_map`.
pub const CHUNK_ELEMENTS: usize = 64;
/// A chunk is sent early once its elements hold this many payload bytes.
pub const CHUNK_BYTES: usize = 4 << 20;

/// An output position: a call not yet answered, or an item to yield as it is.
enum Slot {
    Call { ticket: u64 },
    Ready(Item),
}

pub(super) struct PythonMap {
    input: ElementIter,
    executor: Option<SharedPythonExecutor>,
    stage: PythonStage,
    function: Arc<PyFunction>,
    /// `stages[i]`, for errors.
    path: String,
    parallelism: usize,
    prepared: bool,
    input_done: bool,
    /// Ended: a load failure was yielded.
    ended: bool,
    next_ticket: u64,
    in_flight: usize,
    /// Output order (deterministic) or arrival order of immediate items.
    slots: VecDeque<Slot>,
    /// Answers received before their turn (deterministic mode).
    answers: BTreeMap<u64, PyResponse>,
    /// A filter call's inputs, to yield the ones its answer keeps.
    filtered: BTreeMap<u64, Vec<Element>>,
    /// Items of an answered call, still to yield.
    out: VecDeque<Item>,
    /// A tagged pipeline's sink for the records of dropped elements (filtered
    /// out, or failed: `ignore_errors` may skip them).
    dropped: Option<Dropped>,
    /// Tagged: each call's inputs' origins, kept here while the inputs cross to
    /// Python, put back on the outputs (a map's, a filter's kept inputs).
    origins: BTreeMap<u64, Vec<Option<Tag>>>,
    reply_tx: Sender<PyReply>,
    reply_rx: Receiver<PyReply>,
}

impl PythonMap {
    pub(super) fn new(
        input: ElementIter,
        executor: Option<SharedPythonExecutor>,
        stage: PythonStage,
        path: String,
        dropped: Option<Dropped>,
    ) -> Self {
        let parallelism = match stage.num_parallel_calls {
            0 => executor.as_ref().map_or(1, |e| e.processes().max(1)),
            n => n as usize,
        };
        let (reply_tx, reply_rx) = channel();
        PythonMap {
            input,
            executor,
            function: Arc::new(stage.function.clone()),
            stage,
            path,
            parallelism,
            prepared: false,
            input_done: false,
            ended: false,
            next_ticket: 0,
            in_flight: 0,
            slots: VecDeque::new(),
            answers: BTreeMap::new(),
            filtered: BTreeMap::new(),
            out: VecDeque::new(),
            dropped,
            origins: BTreeMap::new(),
            reply_tx,
            reply_rx,
        }
    }

    fn failure(&self, phase: Phase, failure: PyFailure) -> DatasetError {
        DatasetError::UserFunction(Box::new(UserFunctionFailure {
            stage: self.path.clone(),
            op: self.stage.op.name().to_string(),
            function: self.function.display_name().to_string(),
            worker: String::new(),
            phase,
            failure,
        }))
    }

    /// Loads the function once; `Err` is the load failure to yield.
    fn prepare(&mut self) -> Result<(), DatasetError> {
        self.prepared = true;
        let Some(executor) = &self.executor else {
            return Err(self.failure(
                Phase::Load,
                PyFailure::new(
                    "NoPythonExecutor",
                    "this process does not run Python stages: start the worker with \
                     --allow-python (Python: WorkerServer(allow_python=True))",
                ),
            ));
        };
        executor
            .prepare(&self.function, &self.stage.python)
            .map_err(|f| self.failure(Phase::Load, f))
    }

    /// Up to one call's inputs, and an error from upstream that came right after
    /// them (to yield in its place in the order).
    fn gather(&mut self) -> (Vec<Element>, Option<DatasetError>) {
        let (limit, bytes_limit) = match (self.stage.op, self.stage.batch_size) {
            (PyOp::MapBatches, Some(n)) => (usize::try_from(n).unwrap_or(usize::MAX), usize::MAX),
            _ => (CHUNK_ELEMENTS, CHUNK_BYTES),
        };
        let mut inputs = Vec::new();
        let mut bytes = 0usize;
        while inputs.len() < limit && bytes < bytes_limit {
            match self.input.next() {
                Some(Ok(e)) => {
                    bytes = bytes.saturating_add(e.byte_len());
                    inputs.push(e);
                }
                Some(Err(e)) => {
                    // An element error from upstream keeps its place; any other
                    // error ends the input.
                    self.input_done |= !e.is_element_error();
                    return (inputs, Some(e));
                }
                None => {
                    self.input_done = true;
                    break;
                }
            }
        }
        let short = inputs.len() < limit;
        if self.stage.op == PyOp::MapBatches && short && self.stage.drop_remainder {
            inputs.clear();
        }
        (inputs, None)
    }

    /// Submits calls until `parallelism` are in flight or the input has ended.
    fn fill(&mut self) {
        while !self.input_done && self.in_flight < self.parallelism {
            let (inputs, error) = self.gather();
            if !inputs.is_empty() {
                self.submit(inputs);
            }
            if let Some(e) = error {
                self.slots.push_back(Slot::Ready(Err(e)));
                // Yield what is ready before gathering more.
                break;
            }
        }
    }

    fn submit(&mut self, mut inputs: Vec<Element>) {
        let origins: Option<Vec<_>> =
            self.dropped.as_ref().map(|_| inputs.iter_mut().map(|e| e.origin.take()).collect());
        if self.stage.op == PyOp::MapBatches {
            match stack(&inputs) {
                Ok(batch) => inputs = vec![batch],
                Err(e) => {
                    self.slots.push_back(Slot::Ready(Err(e)));
                    return;
                }
            }
        }
        let Some(executor) = &self.executor else { return };
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let kept = (self.stage.op == PyOp::Filter).then(|| inputs.clone());
        let call = PyCall {
            function: self.function.clone(),
            made_with: self.stage.python.clone(),
            op: self.stage.op,
            inputs,
            retries: self.stage.retries,
        };
        executor.submit(call, ticket, self.reply_tx.clone());
        self.in_flight += 1;
        self.slots.push_back(Slot::Call { ticket });
        if let Some(origins) = origins {
            self.origins.insert(ticket, origins);
        }
        if let Some(kept) = kept {
            self.filtered.insert(ticket, kept);
        }
    }

    /// Waits for the answer to `ticket` (deterministic order).
    fn wait_for(&mut self, ticket: u64) -> PyResponse {
        loop {
            if let Some(r) = self.answers.remove(&ticket) {
                return r;
            }
            match self.reply_rx.recv() {
                Ok(reply) => {
                    self.answers.insert(reply.ticket, reply.response);
                }
                // Unreachable: this stage holds a sender.
                Err(_) => return Err(PyFailure::new("ProcessDied", "the Python pool is gone")),
            }
        }
    }

    /// Turns an answer into the items it stands for.
    fn expand(&mut self, ticket: u64, response: PyResponse) {
        self.in_flight -= 1;
        let inputs = self.filtered.remove(&ticket);
        let mut origins = self.origins.remove(&ticket).unwrap_or_default();
        let mut origin = |i: usize| origins.get_mut(i).and_then(Option::take);
        let outcomes = match response {
            Ok(outcomes) => outcomes,
            Err(f) => {
                self.out.push_back(Err(self.failure(Phase::Load, f)));
                self.ended = true;
                return;
            }
        };
        if let Some(inputs) = &inputs {
            if inputs.len() != outcomes.len() {
                let f = PyFailure::new(
                    "BadOutput",
                    format!("{} answers for {} inputs", outcomes.len(), inputs.len()),
                );
                self.out.push_back(Err(self.failure(Phase::Load, f)));
                self.ended = true;
                return;
            }
        }
        for (i, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                PyOutcome::Element(e) if self.stage.op == PyOp::MapBatches => match unbatch(&e) {
                    Ok(rows) => self.out.extend(rows.into_iter().map(Ok)),
                    Err(m) => {
                        let f = PyFailure::new("BadOutput", m);
                        self.out.push_back(Err(self.failure(Phase::Call, f)));
                    }
                },
                PyOutcome::Element(mut e) => {
                    e.origin = origin(i);
                    self.out.push_back(Ok(e))
                }
                PyOutcome::Keep(keep) => match (keep, inputs.as_ref().and_then(|v| v.get(i))) {
                    (true, Some(e)) => {
                        let mut e = e.clone();
                        e.origin = origin(i);
                        self.out.push_back(Ok(e));
                    }
                    _ => self.drop_origin(origin(i)),
                },
                PyOutcome::Elements(v) => self.out.extend(v.into_iter().map(Ok)),
                PyOutcome::Failed(f) => {
                    self.drop_origin(origin(i));
                    self.out.push_back(Err(self.failure(Phase::Call, f)))
                }
            }
        }
        // Inputs with no output of their own (a flat_map's or map_batches', which
        // a tagged pipeline does not have: `DatasetDef::exactly_once`) are
        // consumed with the next element rather than never.
        for o in origins {
            self.drop_origin(o);
        }
    }

    fn drop_origin(&self, origin: Option<Tag>) {
        if let Some(dropped) = &self.dropped {
            dropped.drop_origin(origin);
        }
    }
}

impl Iterator for PythonMap {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            if self.ended {
                return None;
            }
            if !self.prepared {
                if let Err(e) = self.prepare() {
                    self.ended = true;
                    return Some(Err(e));
                }
            }
            self.fill();
            if self.stage.deterministic {
                match self.slots.pop_front()? {
                    Slot::Ready(item) => return Some(item),
                    Slot::Call { ticket } => {
                        let response = self.wait_for(ticket);
                        self.expand(ticket, response);
                    }
                }
            } else {
                let ready = self.slots.iter().position(|s| matches!(s, Slot::Ready(_)));
                if let Some(Slot::Ready(item)) = ready.and_then(|i| self.slots.remove(i)) {
                    return Some(item);
                }
                if self.slots.is_empty() {
                    return None;
                }
                let reply = match self.reply_rx.recv() {
                    Ok(reply) => reply,
                    Err(_) => return None,
                };
                self.slots
                    .retain(|s| !matches!(s, Slot::Call { ticket } if *ticket == reply.ticket));
                self.expand(reply.ticket, reply.response);
            }
        }
    }
}

/// The rows of a batch `map_batches` returned: every component split along its
/// first dimension, which they must share.
fn unbatch(batch: &Element) -> Result<Vec<Element>, String> {
    let mut rows = None;
    for (c, t) in batch.components.iter().enumerate() {
        let Some(&n) = t.shape().first() else {
            return Err(format!(
                "map_batches returned a scalar for component {c}; return arrays whose first \
                 dimension is the batch"
            ));
        };
        match rows {
            None => rows = Some(n),
            Some(m) if m != n => {
                return Err(format!(
                    "map_batches returned arrays of {m} and {n} rows; every array of the \
                     returned batch must have the same first dimension"
                ));
            }
            Some(_) => {}
        }
    }
    let names: Option<Vec<String>> = batch.names.as_deref().map(<[String]>::to_vec);
    let slicer = Slicer::new(&batch.components, names.as_deref()).map_err(|e| e.to_string())?;
    (0..rows.unwrap_or(0) as usize).map(|i| slicer.element(i).map_err(|e| e.to_string())).collect()
}
