//! `map` with `num_parallel_calls` > 1. (Being written; see issue 5.)

use crate::def::FnCall;
use crate::error::DatasetError;
use crate::registry::MapFn;
use crate::tensor::Element;

use super::ElementIter;

pub(super) struct ParallelMap {
    err: Option<DatasetError>,
}

impl ParallelMap {
    pub(super) fn new(
        _input: ElementIter,
        _call: FnCall,
        _f: MapFn,
        _threads: usize,
        _deterministic: bool,
    ) -> Self {
        ParallelMap { err: Some(DatasetError::Unsupported("parallel map: not yet".into())) }
    }
}

impl Iterator for ParallelMap {
    type Item = Result<Element, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.err.take().map(Err)
    }
}
