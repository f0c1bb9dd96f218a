//! `shuffle(buffer_size, seed)`: tf.data's buffered shuffle.
//!
//! Fill a buffer with the first `buffer_size` input elements, then repeatedly emit
//! a uniformly chosen buffered element and put the next input element in its slot;
//! once the input ends, drain the buffer in random order. A buffer at least as large
//! as the input gives a uniform permutation; a smaller one only mixes locally.
//!
//! The RNG is ChaCha8 seeded with `seed` (reproducible across runs and platforms)
//! and belongs to the plan, not to this iterator: a `repeat` downstream rebuilds the
//! shuffle each epoch and the RNG carries on, so each epoch gets a different but
//! deterministic order.

use std::sync::{Arc, Mutex};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::error::DatasetError;
use crate::tensor::Element;

use super::stream::{lock, ElementIter};

/// Largest number of element slots reserved up front; a bigger buffer grows as it
/// fills (it is still bounded by `buffer_size`).
const MAX_RESERVE: usize = 1024;

pub(super) struct Shuffle {
    input: ElementIter,
    input_done: bool,
    capacity: usize,
    buffer: Vec<Element>,
    rng: Arc<Mutex<ChaCha8Rng>>,
}

impl Shuffle {
    pub(super) fn new(input: ElementIter, buffer_size: u64, rng: Arc<Mutex<ChaCha8Rng>>) -> Self {
        let capacity = usize::try_from(buffer_size).unwrap_or(usize::MAX).max(1);
        let buffer = Vec::with_capacity(capacity.min(MAX_RESERVE));
        Shuffle { input, input_done: false, capacity, buffer, rng }
    }

    /// Pulls the next input element, `Ok(None)` at the end of the input.
    fn pull(&mut self) -> Result<Option<Element>, DatasetError> {
        if self.input_done {
            return Ok(None);
        }
        match self.input.next() {
            Some(item) => item.map(Some),
            None => {
                self.input_done = true;
                Ok(None)
            }
        }
    }
}

impl Iterator for Shuffle {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.buffer.len() < self.capacity {
            match self.pull() {
                Ok(Some(e)) => self.buffer.push(e),
                Ok(None) => break,
                Err(e) => return Some(Err(e)),
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let i = lock(&self.rng).gen_range(0..self.buffer.len());
        match self.pull() {
            Ok(Some(replacement)) => Some(Ok(std::mem::replace(&mut self.buffer[i], replacement))),
            Ok(None) => Some(Ok(self.buffer.swap_remove(i))),
            Err(e) => Some(Err(e)),
        }
    }
}
