//! `parse_example`. (Being written; see issue 5.)

use crate::def::FeatureSpec;
use crate::error::DatasetError;
use crate::tensor::Element;

use super::ElementIter;

pub(super) struct ParseExample {
    err: Option<DatasetError>,
}

impl ParseExample {
    pub(super) fn new(_input: ElementIter, _features: Vec<FeatureSpec>) -> Self {
        ParseExample { err: Some(DatasetError::Unsupported("parse_example: not yet".into())) }
    }
}

impl Iterator for ParseExample {
    type Item = Result<Element, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.err.take().map(Err)
    }
}
