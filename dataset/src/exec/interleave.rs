//! `flat_map` and `interleave`: each input element becomes a stream (made by a
//! registry dataset function, e.g. the records of the file it names) and the
//! streams' elements are merged in a fixed order.
//!
//! tf.data's order: `cycle_length` slots each hold an open stream; the consumer
//! takes `block_length` elements from the current slot, then moves to the next
//! slot round-robin. When a slot's stream ends, the consumer moves on and the slot
//! takes the next input element's stream. The stage ends when the input and every
//! slot are exhausted. `flat_map` is `cycle_length = block_length = 1`.
//!
//! **Opening eagerly.** tf.data's sequential interleave opens a slot when it next
//! visits it; here every slot is (re)filled as soon as it is free: the first
//! `cycle_length` input elements at the first `next`, then the next input element
//! whenever a stream ends. Both assign input elements to slots in the same order
//! (a slot is revisited exactly one round after it ended, so refills happen in
//! the order streams end), so the output is identical; opening early is what lets
//! the streams of one round be read at the same time. An error met while opening
//! (the input's, or the function's) is parked in the slot and yielded when the
//! round reaches it: in the position tf.data would yield it.
//!
//! **Threads.** With `parallelism` > 1, a slot opened while fewer than
//! `parallelism` producer threads are busy is read by one of the stage's pool
//! threads (named `sluice-interleave`, `interleave_pool`: they outlive the
//! streams they read): it calls the function and reads the stream ahead into a
//! bounded channel of [`read_ahead`] messages, so slow reads (files, S3) overlap.
//! A message is one element while the channel has room; while it is full, a
//! producer gathers up to [`CHUNK`] elements or [`CHUNK_BYTES`] (at least one
//! element) into one message. A reader slower than its producers (the usual case:
//! four threads read files for one consumer) then wakes a parked producer once a
//! chunk, not once an element: waking it per element cost a context switch per
//! record, ~15 % of a worker's CPU on 11 KB TFRecord records (docs/performance.md).
//! So a producer holds at most `read_ahead + 1` messages (the channel's and the
//! one it gathers), each of at most `CHUNK` elements and `CHUNK_BYTES` plus one
//! element. Other slots are read on the consumer's thread. So at most
//! `min(parallelism, cycle_length)` threads and `parallelism × (read_ahead + 1)`
//! messages buffered. The consumer still takes elements in the round-robin order
//! above, so the output does not depend on `parallelism`. Unlike tf.data, no
//! streams beyond the open `cycle_length` are prefetched.
//!
//! **Errors and shutdown.** The first error ends the stage, except an element
//! error (`DatasetError::is_element_error`: a bad record of an intact file),
//! which takes its place in the order like an element and lets the stream go on. The end, an error or
//! dropping the stage closes every channel (a producer's next `send` fails) and
//! joins the producers: each finishes at most the `next` it is in. Panics in the
//! dataset function or in its stream's `next` become `DatasetError::Function`.
//! Dropping the stage joins the pool's threads.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

use crate::def::{Arg, FnCall};
use crate::error::DatasetError;
use crate::registry::DatasetFn;
use crate::tensor::Element;

use super::interleave_pool::{Job, Pool};
#[cfg(doc)]
use super::interleave_pool::{CHUNK, CHUNK_BYTES};
use super::ops::call;
use super::stream::ElementIter;

type Item = Result<Element, DatasetError>;

/// How an interleave walks its inputs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub cycle_length: usize,
    pub block_length: usize,
    /// Threads reading the open inputs ahead; 1 reads them on the caller's thread.
    pub parallelism: usize,
}

/// Elements a producer thread reads ahead of the consumer: a block, but at
/// least 16 (so short blocks still overlap reads) and at most 64 (memory).
fn read_ahead(block_length: usize) -> usize {
    block_length.clamp(16, 64)
}

/// One open slot of the cycle.
enum Slot {
    /// Read on the consumer's thread.
    Inline(ElementIter),
    /// Read ahead by pool thread `thread`.
    Threaded {
        rx: Receiver<Vec<Item>>,
        /// The rest of the message being read.
        chunk: std::vec::IntoIter<Item>,
        thread: usize,
    },
    /// Opening failed; the error is yielded when the round reaches the slot.
    Failed(DatasetError),
}

pub(super) struct Interleave {
    /// `None` once the input has ended or failed.
    input: Option<ElementIter>,
    name: String,
    args: Arc<[Arg]>,
    f: DatasetFn,
    block_length: usize,
    parallelism: usize,
    slots: Vec<Option<Slot>>,
    started: bool,
    cycle_index: usize,
    /// Elements taken from the current slot in this block.
    block_index: usize,
    /// Slots holding something (`Some`).
    num_open: usize,
    /// The threads reading threaded slots.
    pool: Pool,
}

impl Interleave {
    pub(super) fn new(input: ElementIter, call: FnCall, f: DatasetFn, shape: Shape) -> Self {
        let cycle_length = shape.cycle_length.max(1);
        Interleave {
            input: Some(input),
            name: call.name,
            args: call.args.into(),
            f,
            block_length: shape.block_length.max(1),
            parallelism: shape.parallelism.max(1),
            slots: (0..cycle_length).map(|_| None).collect(),
            started: false,
            cycle_index: 0,
            block_index: 0,
            num_open: 0,
            pool: Pool::new(shape.parallelism.max(1)),
        }
    }

    /// Fills slot `idx` with the next input element's stream (if any remains).
    fn open(&mut self, idx: usize) {
        let Some(input) = self.input.as_mut() else {
            return;
        };
        let slot = match input.next() {
            None => {
                self.input = None;
                return;
            }
            Some(Err(e)) => {
                self.input = None;
                Slot::Failed(e)
            }
            Some(Ok(element)) if self.parallelism > 1 && self.pool.busy() < self.parallelism => {
                match self.spawn(element) {
                    Ok(slot) => slot,
                    Err(element) => self.open_inline(element),
                }
            }
            Some(Ok(element)) => self.open_inline(element),
        };
        if let Some(place) = self.slots.get_mut(idx) {
            *place = Some(slot);
            self.num_open += 1;
        }
    }

    fn open_inline(&self, element: Element) -> Slot {
        let (f, args) = (&self.f, &self.args[..]);
        match call(&self.name, || f(element, args)) {
            Ok(stream) => Slot::Inline(stream),
            Err(e) => Slot::Failed(e),
        }
    }

    /// Has a pool thread read `element`'s stream; gives the element back if no
    /// thread can take it.
    fn spawn(&mut self, element: Element) -> Result<Slot, Element> {
        let (tx, rx) = sync_channel(read_ahead(self.block_length));
        let (name, args, f) = (self.name.clone(), self.args.clone(), self.f.clone());
        let job = Box::new(Job { element, tx, name, args, f });
        match self.pool.run(job) {
            Ok(thread) => Ok(Slot::Threaded { rx, chunk: Vec::new().into_iter(), thread }),
            Err(job) => Err(job.element),
        }
    }

    /// Empties slot `idx` (its stream has ended).
    fn close(&mut self, idx: usize) {
        if let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) {
            self.num_open -= 1;
            if let Slot::Threaded { thread, .. } = slot {
                self.pool.release(thread);
            }
        }
    }

    fn advance_to_next_in_cycle(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.slots.len().max(1);
    }

    /// Drops the input and every stream, stopping and joining the producers.
    fn shutdown(&mut self) {
        self.input = None;
        self.num_open = 0;
        // Close every channel first so that all producers stop at once, then join.
        self.slots.iter_mut().for_each(|slot| drop(slot.take()));
        self.pool.shutdown();
    }
}

impl Iterator for Interleave {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if !self.started {
            self.started = true;
            (0..self.slots.len()).for_each(|i| self.open(i));
        }
        loop {
            if self.num_open == 0 {
                // Slots are refilled as they free up, so the input is exhausted too.
                self.shutdown();
                return None;
            }
            let idx = self.cycle_index;
            let Some(slot) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
                self.advance_to_next_in_cycle();
                continue;
            };
            match read(slot, &self.name) {
                Some(Err(e)) if !e.is_element_error() => {
                    self.shutdown();
                    return Some(Err(e));
                }
                Some(item) => {
                    self.block_index += 1;
                    if self.block_index >= self.block_length {
                        self.advance_to_next_in_cycle();
                    }
                    return Some(item);
                }
                None => {
                    self.close(idx);
                    self.open(idx);
                    self.advance_to_next_in_cycle();
                }
            }
        }
    }
}

impl Drop for Interleave {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The next item of a slot's stream, `None` at its end.
fn read(slot: &mut Slot, name: &str) -> Option<Item> {
    match slot {
        Slot::Inline(stream) => match call(name, || Ok(stream.next())) {
            Ok(item) => item,
            Err(e) => Some(Err(e)),
        },
        Slot::Threaded { rx, chunk, .. } => {
            if let Some(item) = chunk.next() {
                return Some(item);
            }
            // An end of the channel is the end of the stream: the pool thread
            // sends a panic as an error item first.
            let items = rx.recv().ok()?;
            *chunk = items.into_iter();
            chunk.next()
        }
        Slot::Failed(e) => Some(Err(e.clone())),
    }
}
