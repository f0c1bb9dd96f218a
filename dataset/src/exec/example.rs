//! `parse_example`: each input element (one bytes or string scalar holding a
//! serialized `tf.train.Example`) becomes one named component per feature spec;
//! the conversion itself lives in `formats::example`.

use std::sync::Arc;

use crate::def::FeatureSpec;
use crate::error::DatasetError;
use crate::formats::example;
use crate::tensor::{DType, Element};

use super::stream::ElementIter;

pub(super) struct ParseExample {
    input: ElementIter,
    features: Vec<FeatureSpec>,
    /// The component names, shared by every output element.
    names: Arc<[String]>,
}

impl ParseExample {
    pub(super) fn new(input: ElementIter, features: Vec<FeatureSpec>) -> Self {
        let names = example::names(&features);
        ParseExample { input, features, names }
    }

    fn parse(&self, e: Element) -> Result<Element, DatasetError> {
        let record = match e.components.as_slice() {
            [t] if t.shape().is_empty() && matches!(t.dtype(), DType::Bytes | DType::String) => {
                t.items()?.into_iter().next()
            }
            _ => None,
        };
        let Some(record) = record else {
            let found: Vec<String> = e
                .components
                .iter()
                .map(|t| format!("{} {:?}", t.dtype().name(), t.shape()))
                .collect();
            return Err(DatasetError::TypeMismatch {
                expected: "one bytes or string scalar (a serialized tf.train.Example) \
                           as parse_example's input"
                    .into(),
                found: format!("({})", found.join(", ")),
            });
        };
        example::parse(record, &self.features, &self.names)
    }
}

impl Iterator for ParseExample {
    type Item = Result<Element, DatasetError>;
    fn next(&mut self) -> Option<Self::Item> {
        let item = self.input.next()?;
        // A 1:1 stage: the output stands for the input's records.
        Some(item.and_then(|mut e| {
            let origin = e.origin.take();
            self.parse(e).map(|mut out| {
                out.origin = origin;
                out
            })
        }))
    }
}
