//! `zip`, `concatenate`, `enumerate`, `shard`. (Being written; see issue 5.)

use crate::error::DatasetError;
use crate::tensor::Element;

use super::{Deferred, ElementIter};

type Item = Result<Element, DatasetError>;

fn not_yet(op: &str) -> Option<DatasetError> {
    Some(DatasetError::Unsupported(format!("{op}: not yet")))
}

pub(super) struct Zip {
    err: Option<DatasetError>,
}
impl Zip {
    pub(super) fn new(_input: ElementIter, _others: Vec<Deferred>) -> Self {
        Zip { err: not_yet("zip") }
    }
}
impl Iterator for Zip {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        self.err.take().map(Err)
    }
}

pub(super) struct Concatenate {
    err: Option<DatasetError>,
}
impl Concatenate {
    pub(super) fn new(_input: ElementIter, _next: Deferred) -> Self {
        Concatenate { err: not_yet("concatenate") }
    }
}
impl Iterator for Concatenate {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        self.err.take().map(Err)
    }
}

pub(super) struct Enumerate {
    err: Option<DatasetError>,
}
impl Enumerate {
    pub(super) fn new(_input: ElementIter, _start: i64) -> Self {
        Enumerate { err: not_yet("enumerate") }
    }
}
impl Iterator for Enumerate {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        self.err.take().map(Err)
    }
}

pub(super) struct Shard {
    err: Option<DatasetError>,
}
impl Shard {
    pub(super) fn new(_input: ElementIter, _num_shards: u64, _index: u64) -> Self {
        Shard { err: not_yet("shard") }
    }
}
impl Iterator for Shard {
    type Item = Item;
    fn next(&mut self) -> Option<Item> {
        self.err.take().map(Err)
    }
}
