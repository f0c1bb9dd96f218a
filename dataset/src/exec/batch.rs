//! `batch(size, drop_remainder)`: stacks consecutive elements componentwise.
//!
//! Because every dtype's payload is a plain concatenation of its values (fixed-width
//! values, or u32-length-prefixed items for strings and bytes), stacking `n` tensors
//! of equal dtype and shape is concatenating their payloads under the shape
//! `[n] + shape`; no value is decoded.

use bytes::BytesMut;
use sluice_positions::Tag;

use crate::error::DatasetError;
use crate::tensor::{Element, Tensor};

use super::stream::ElementIter;
use super::tagging::Dropped;

/// Largest number of element slots reserved up front; a bigger batch grows its
/// buffer as elements arrive (it is still bounded by `size`).
const MAX_RESERVE: usize = 1024;

pub(super) struct Batch {
    input: ElementIter,
    /// A tagged pipeline's sink: the batch joins its inputs' origins, and a
    /// dropped remainder's go there.
    dropped: Option<Dropped>,
    size: usize,
    drop_remainder: bool,
    done: bool,
    /// The batch being filled: kept across an element error from upstream (a user
    /// function's failure, which `ignore_errors` downstream may skip), so the
    /// elements before it are not lost.
    elements: Vec<Element>,
}

impl Batch {
    pub(super) fn new(
        input: ElementIter,
        size: u64,
        drop_remainder: bool,
        dropped: Option<Dropped>,
    ) -> Self {
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        Batch { input, dropped, size, drop_remainder, done: false, elements: Vec::new() }
    }
}

impl Iterator for Batch {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.elements.capacity() == 0 {
            self.elements.reserve(self.size.min(MAX_RESERVE));
        }
        while self.elements.len() < self.size {
            match self.input.next() {
                Some(Ok(e)) => self.elements.push(e),
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    self.done = true;
                    break;
                }
            }
        }
        let mut elements = std::mem::take(&mut self.elements);
        let Some(dropped) = &self.dropped else {
            if elements.is_empty() || (elements.len() < self.size && self.drop_remainder) {
                return None;
            }
            return Some(stack(&elements));
        };
        // Consecutive records of one unit stay one inline run (no allocation).
        let mut origin: Option<Tag> = None;
        for e in &mut elements {
            match (&mut origin, e.origin.take()) {
                (Some(origin), Some(o)) => origin.append(o),
                (origin @ None, o) => *origin = o,
                (Some(_), None) => {}
            }
        }
        if elements.is_empty() || (elements.len() < self.size && self.drop_remainder) {
            dropped.drop_origin(origin);
            return None;
        }
        Some(stack(&elements).map(|mut batch| {
            batch.origin = origin;
            batch
        }))
    }
}

fn describe(t: &Tensor) -> String {
    format!("{}{:?}", t.dtype().name(), t.shape())
}

/// Stacks `elements` (at least one) into one element with a leading dimension.
pub(crate) fn stack(elements: &[Element]) -> Result<Element, DatasetError> {
    let Some(first) = elements.first() else {
        return Ok(Element::new(vec![]));
    };
    let n = elements.len() as u64;
    let mut components = Vec::with_capacity(first.components.len());
    for (c, proto) in first.components.iter().enumerate() {
        let mut data = BytesMut::with_capacity(proto.byte_len().saturating_mul(elements.len()));
        for (i, e) in elements.iter().enumerate() {
            if e.components.len() != first.components.len() {
                return Err(DatasetError::TypeMismatch {
                    expected: format!(
                        "{} components in batch element {i} (as in element 0)",
                        first.components.len()
                    ),
                    found: format!("{} components", e.components.len()),
                });
            }
            let t = &e.components[c];
            if t.dtype() != proto.dtype() || t.shape() != proto.shape() {
                return Err(DatasetError::TypeMismatch {
                    expected: format!(
                        "component {c} of batch element {i} to be {} like element 0",
                        describe(proto)
                    ),
                    found: describe(t),
                });
            }
            data.extend_from_slice(t.data());
        }
        let mut shape = Vec::with_capacity(proto.shape().len() + 1);
        shape.push(n);
        shape.extend_from_slice(proto.shape());
        components.push(Tensor::new(proto.dtype(), shape, data.freeze())?);
    }
    // Named components (e.g. parsed Example features) stay named in the batch.
    Ok(Element { components, names: first.names.clone(), origin: None })
}
