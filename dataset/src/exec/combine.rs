//! `zip`, `concatenate`, `enumerate`, `shard`: the stages that combine or count
//! streams without calling user code.
//!
//! Nested pipelines (`zip`'s others, `concatenate`'s continuation) arrive as
//! [`Deferred`]s and are started only when first needed, as tf.data creates their
//! iterators lazily: a `concatenate` never opens its second input if the consumer
//! stops during the first.
//!
//! Component names: an element is a flat tuple here (tf.data would nest a tuple of
//! dicts), so combining named elements concatenates their name lists. Names are
//! kept only when every side is named and the result has no duplicate (a duplicate
//! would make `Element::get` ambiguous and the JSON form drop a component);
//! otherwise the result is a plain tuple. The combined list is computed once per
//! distinct set of input name lists, not per element.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::error::DatasetError;
use crate::tensor::{Element, Tensor};

use super::stream::{Deferred, ElementIter};

type Item = Result<Element, DatasetError>;
type Names = Option<Arc<[String]>>;

/// Remembers the last combination of name lists and its result, so that the
/// usual case (every element of a stage shares one `Arc`) costs pointer compares.
#[derive(Default)]
struct NameCache {
    inputs: Vec<Names>,
    combined: Names,
}

impl NameCache {
    fn combine(&mut self, inputs: Vec<Names>) -> Names {
        let same = self.inputs.len() == inputs.len()
            && self.inputs.iter().zip(&inputs).all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            });
        if !same {
            self.combined = concat_names(&inputs);
            self.inputs = inputs;
        }
        self.combined.clone()
    }
}

/// The concatenated name lists, if all are present and the result is unambiguous.
fn concat_names(inputs: &[Names]) -> Names {
    let mut all: Vec<String> = Vec::new();
    for names in inputs {
        all.extend(names.as_deref()?.iter().cloned());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    (distinct.len() == all.len()).then(|| all.into())
}

enum Others {
    NotStarted(Vec<Deferred>),
    Running(Vec<ElementIter>),
}

/// Each element of the input followed by the components of the next element of
/// each other pipeline; ends with the first side that ends.
pub(super) struct Zip {
    input: ElementIter,
    others: Others,
    names: NameCache,
}

impl Zip {
    pub(super) fn new(input: ElementIter, others: Vec<Deferred>) -> Self {
        Zip { input, others: Others::NotStarted(others), names: NameCache::default() }
    }

    fn start(&mut self) -> Result<(), DatasetError> {
        if let Others::NotStarted(deferred) = &mut self.others {
            let started: Result<Vec<ElementIter>, _> =
                std::mem::take(deferred).into_iter().map(|d| d()).collect();
            // On an error the other pipelines started so far are dropped here.
            self.others = Others::Running(started?);
        }
        Ok(())
    }
}

impl Iterator for Zip {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let Err(e) = self.start() {
            return Some(Err(e));
        }
        let Others::Running(others) = &mut self.others else {
            return None;
        };
        // tf.data pulls every side in order, each once per output element.
        let first = match self.input.next()? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        let mut names = vec![first.names];
        let mut components = first.components;
        for other in others.iter_mut() {
            match other.next()? {
                Ok(e) => {
                    names.push(e.names);
                    components.extend(e.components);
                }
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(Element { components, names: self.names.combine(names), origin: None }))
    }
}

/// The input's elements, then those of the next pipeline (started when the input
/// ends). Like tf.data, but without its check that both sides have the same
/// structure: elements pass through as they are.
pub(super) struct Concatenate {
    input: Option<ElementIter>,
    next: Option<Deferred>,
    second: Option<ElementIter>,
}

impl Concatenate {
    pub(super) fn new(input: ElementIter, next: Deferred) -> Self {
        Concatenate { input: Some(input), next: Some(next), second: None }
    }
}

impl Iterator for Concatenate {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let Some(input) = self.input.as_mut() {
            match input.next() {
                Some(item) => return Some(item),
                // Release the first input before starting the second.
                None => self.input = None,
            }
        }
        if let Some(start) = self.next.take() {
            match start() {
                Ok(it) => self.second = Some(it),
                Err(e) => return Some(Err(e)),
            }
        }
        self.second.as_mut()?.next()
    }
}

/// Prepends an int64 scalar counter, named `index` when the input is named.
pub(super) struct Enumerate {
    input: ElementIter,
    /// The next index; `None` once it has overflowed int64.
    counter: Option<i64>,
    names: NameCache,
    index_name: Names,
}

impl Enumerate {
    pub(super) fn new(input: ElementIter, start: i64) -> Self {
        Enumerate {
            input,
            counter: Some(start),
            names: NameCache::default(),
            index_name: Some(Arc::from(vec!["index".to_string()])),
        }
    }
}

impl Iterator for Enumerate {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let element = match self.input.next()? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        let Some(index) = self.counter else {
            return Some(Err(DatasetError::Unsupported(
                "enumerate: the counter overflows int64".into(),
            )));
        };
        self.counter = index.checked_add(1);
        let names = match element.names {
            Some(names) => self.names.combine(vec![self.index_name.clone(), Some(names)]),
            None => None,
        };
        let mut components = Vec::with_capacity(element.components.len() + 1);
        components.push(Tensor::scalar_i64(index));
        components.extend(element.components);
        Some(Ok(Element { components, names, origin: None }))
    }
}

/// Keeps the elements at positions `index, index + num_shards, …`. The others are
/// pulled and dropped as they come; an error at any position is still yielded (as
/// tf.data's `shard` does, since it pulls every input element too).
pub(super) struct Shard {
    input: ElementIter,
    num_shards: u64,
    index: u64,
    position: u64,
}

impl Shard {
    pub(super) fn new(input: ElementIter, num_shards: u64, index: u64) -> Self {
        Shard { input, num_shards, index, position: 0 }
    }
}

impl Iterator for Shard {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.num_shards == 0 || self.index >= self.num_shards {
            // `DatasetDef::validate` rejects these; an error rather than a panic.
            return Some(Err(DatasetError::InvalidSpec {
                field: "shard".into(),
                message: format!(
                    "index {} is not below num_shards {}",
                    self.index, self.num_shards
                ),
            }));
        }
        loop {
            let item = self.input.next()?;
            let keep = self.position % self.num_shards == self.index;
            self.position += 1;
            if keep || item.is_err() {
                return Some(item);
            }
        }
    }
}
