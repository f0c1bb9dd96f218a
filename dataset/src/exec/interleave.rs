//! `flat_map` and `interleave`. (Being written; see issue 5.)

use crate::def::FnCall;
use crate::error::DatasetError;
use crate::registry::DatasetFn;
use crate::tensor::Element;

use super::ElementIter;

/// How an interleave walks its inputs.
#[derive(Clone, Copy, Debug)]
#[allow(dead_code)] // read once the interleave lands
pub(super) struct Shape {
    pub cycle_length: usize,
    pub block_length: usize,
    /// Threads reading the open inputs ahead; 1 reads them on the caller's thread.
    pub parallelism: usize,
}

#[allow(dead_code)] // until the interleave lands
pub(super) struct Interleave {
    err: Option<DatasetError>,
}

impl Interleave {
    pub(super) fn new(_input: ElementIter, _call: FnCall, _f: DatasetFn, _shape: Shape) -> Self {
        Interleave { err: Some(DatasetError::Unsupported("interleave: not yet".into())) }
    }
}

impl Iterator for Interleave {
    type Item = Result<Element, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.err.take().map(Err)
    }
}
