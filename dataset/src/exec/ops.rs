//! The simple one-in, at-most-one-out stages: `map`, `filter`, `take`, `skip`, and
//! the fuse that ends every stage at its first error.
//!
//! Registry functions are user code: a panic in one becomes a
//! `DatasetError::Function` for that element instead of taking the worker's
//! executor thread down.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_positions::Tag;

use crate::def::{Arg, FnCall};
use crate::error::DatasetError;
use crate::registry::{ElementKey, FilterFn, KeyedMapFn};
use crate::tensor::Element;

use super::stream::ElementIter;
use super::tagging::Dropped;

type Item = Result<Element, DatasetError>;

/// Yields the inner items up to and including the first error, then nothing.
/// The inner iterator is dropped as soon as it is done, releasing what it holds
/// (a prefetch thread, buffered elements). An element error (a user function
/// failed on one element, [`DatasetError::is_element_error`]) does not end it: the
/// stage goes on with the next element, and `ignore_errors` may skip the error.
pub(super) struct Fuse {
    inner: Option<ElementIter>,
}

impl Fuse {
    pub(super) fn new(inner: ElementIter) -> Self {
        Fuse { inner: Some(inner) }
    }
}

impl Iterator for Fuse {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let item = self.inner.as_mut()?.next();
        let goes_on = match &item {
            Some(Ok(_)) => true,
            Some(Err(e)) => e.is_element_error(),
            None => false,
        };
        if !goes_on {
            self.inner = None;
        }
        item
    }
}

fn function_error(name: &str, message: String) -> DatasetError {
    DatasetError::Function { name: name.to_string(), message }
}

/// Runs a registry function, turning its error or panic into a `Function` error.
/// `AssertUnwindSafe`: after a panic the stage yields this error and is fused, so
/// no state the function may have left half-updated is used again by this stage.
pub(super) fn call<T>(
    name: &str,
    f: impl FnOnce() -> Result<T, String>,
) -> Result<T, DatasetError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(|m| function_error(name, m)),
        Err(panic) => Err(function_error(name, panicked(panic))),
    }
}

fn panicked(panic: Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".to_string());
    format!("panicked: {what}")
}

/// What a map call's error means for the stream.
#[derive(Clone)]
pub(super) enum Failure {
    /// The stream ends (a function that fails on its arguments or has a bug).
    Ends,
    /// Only the element fails: a decoder met bad bytes
    /// (`FunctionRegistry::map_fails_per_element`). The error is a `BadInput`
    /// element error and, in a tagged pipeline, the element's records go to the
    /// stage's sink (consumed once, with the next element). A panic still ends
    /// the stream.
    OfElement(Option<Dropped>),
}

/// Calls a map function on `element`, the `index`-th its stage has taken; the
/// output stands for the input's records (its origin, in a tagged pipeline). The
/// function sees the origin, or else the index, as its [`ElementKey`]; its error
/// names the origin where there is one. A failed call ends the stream unless
/// `failure` says it is the element's ([`Failure::OfElement`]); a fatal one
/// needs no sink for its input's origin.
pub(super) fn map_keeping_origin(
    name: &str,
    mut element: Element,
    index: u64,
    failure: &Failure,
    f: impl FnOnce(Element, ElementKey<'_>) -> Result<Element, String>,
) -> Item {
    let origin = element.origin.take();
    let key = origin.as_ref().map_or(ElementKey::Index(index), ElementKey::Origin);
    let (message, fatal) = match catch_unwind(AssertUnwindSafe(|| f(element, key))) {
        Ok(Ok(mut out)) => {
            out.origin = origin;
            return Ok(out);
        }
        Ok(Err(message)) => (message, false),
        Err(panic) => (panicked(panic), true),
    };
    let message = match &origin {
        Some(o) => format!("{message} (element of {})", describe(o)),
        None => message,
    };
    let name = name.to_string();
    match failure {
        Failure::OfElement(dropped) if !fatal => {
            if let Some(dropped) = dropped {
                dropped.drop_origin(origin);
            }
            Err(DatasetError::BadInput { name, message })
        }
        _ => Err(DatasetError::Function { name, message }),
    }
}

/// The records an origin names, for an error message: `unit 3, record 17`, or the
/// runs of a batch's.
fn describe(origin: &Tag) -> String {
    let runs: Vec<String> = origin
        .runs()
        .iter()
        .map(|r| match r.count {
            1 => format!("unit {}, record {}", r.unit, r.first),
            n => format!("unit {}, records {}..{}", r.unit, r.first, r.first.saturating_add(n)),
        })
        .collect();
    if runs.is_empty() {
        "no record".into()
    } else {
        runs.join("; ")
    }
}

pub(super) struct Map {
    input: ElementIter,
    name: String,
    args: Vec<Arg>,
    f: KeyedMapFn,
    /// Elements this stage has taken, shared by its instantiations (the plan's).
    taken: Arc<AtomicU64>,
    failure: Failure,
}

impl Map {
    pub(super) fn new(
        input: ElementIter,
        call: FnCall,
        f: KeyedMapFn,
        taken: Arc<AtomicU64>,
        failure: Failure,
    ) -> Self {
        Map { input, name: call.name, args: call.args, f, taken, failure }
    }
}

impl Iterator for Map {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let element = match self.input.next()? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        let index = self.taken.fetch_add(1, Ordering::Relaxed);
        let (f, args, failure) = (&self.f, &self.args, &self.failure);
        Some(map_keeping_origin(&self.name, element, index, failure, |e, key| f(e, args, key)))
    }
}

pub(super) struct Filter {
    input: ElementIter,
    name: String,
    args: Vec<Arg>,
    f: FilterFn,
    /// A tagged pipeline's sink for what the filter drops.
    dropped: Option<Dropped>,
}

impl Filter {
    pub(super) fn new(
        input: ElementIter,
        call: FnCall,
        f: FilterFn,
        dropped: Option<Dropped>,
    ) -> Self {
        Filter { input, name: call.name, args: call.args, f, dropped }
    }
}

impl Iterator for Filter {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            let element = match self.input.next()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            let (f, args) = (&self.f, &self.args);
            match call(&self.name, || f(&element, args)) {
                Ok(true) => return Some(Ok(element)),
                Ok(false) => {
                    if let Some(dropped) = &self.dropped {
                        dropped.drop_origin(element.origin);
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The first `remaining` elements; the input is dropped once they are out, without
/// pulling one more.
pub(super) struct Take {
    input: Option<ElementIter>,
    remaining: u64,
}

impl Take {
    pub(super) fn new(input: ElementIter, count: u64) -> Self {
        Take { input: Some(input), remaining: count }
    }
}

impl Iterator for Take {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.remaining == 0 {
            self.input = None;
            return None;
        }
        let item = self.input.as_mut()?.next()?;
        self.remaining -= 1;
        Some(item)
    }
}

/// Everything after the first `to_skip` elements (errors among those are yielded).
pub(super) struct Skip {
    input: ElementIter,
    to_skip: u64,
}

impl Skip {
    pub(super) fn new(input: ElementIter, count: u64) -> Self {
        Skip { input, to_skip: count }
    }
}

impl Iterator for Skip {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        while self.to_skip > 0 {
            match self.input.next()? {
                Ok(_) => self.to_skip -= 1,
                Err(e) => return Some(Err(e)),
            }
        }
        self.input.next()
    }
}

/// `ignore_errors`: skips element errors from upstream, counting them in
/// `skipped`; any other error is yielded (and ends the pipeline).
pub(super) struct IgnoreErrors {
    input: ElementIter,
    skipped: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl IgnoreErrors {
    pub(super) fn new(
        input: ElementIter,
        skipped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) -> Self {
        IgnoreErrors { input, skipped }
    }
}

impl Iterator for IgnoreErrors {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            match self.input.next()? {
                Err(e) if e.is_element_error() => {
                    self.skipped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(error = %e, "ignore_errors skipped an element");
                }
                item => return Some(item),
            }
        }
    }
}
