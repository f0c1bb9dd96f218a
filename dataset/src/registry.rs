//! The function registry: the names a pipeline's `map` and `filter` stages may call.
//!
//! tf.data traces Python functions into graphs and ships them to workers; Sluice
//! ships only a function *name* and constant arguments ([`FnCall`]). A worker runs
//! the functions of its [`FunctionRegistry`], much like TensorFlow custom ops: a
//! custom worker binary starts from [`FunctionRegistry::builtin`], registers its own
//! functions and advertises [`FunctionRegistry::names`] to the dispatcher, which can
//! then refuse a dataset that calls a function no worker has.
//!
//! Checking a pipeline ([`FunctionRegistry::check`]) is separate from running it so
//! that the dispatcher and the client can reject a bad definition before any worker
//! starts it.
//!
//! ```
//! use sluice_dataset::{Arg, DatasetDef, Element, FunctionRegistry, Tensor};
//!
//! let mut registry = FunctionRegistry::builtin();
//! // `clip(lo, hi)`: limits a scalar int64 to [lo, hi].
//! registry.register_map("clip", 2, |e: Element, args: &[Arg]| {
//!     let [Arg::Int(lo), Arg::Int(hi)] = args else {
//!         return Err(format!("needs two integer bounds, got {args:?}"));
//!     };
//!     let x = e.as_i64().map_err(|e| e.to_string())?;
//!     Ok(Element::single(Tensor::scalar_i64(x.max(*lo).min(*hi))))
//! });
//! assert!(registry.names().contains(&"map:clip".to_string()));
//!
//! let def = DatasetDef::range(8).map_with("clip", vec![Arg::Int(2), Arg::Int(5)]);
//! let out: Vec<i64> = def
//!     .iter_local(&registry)?
//!     .map(|e| e.and_then(|e| e.as_i64()))
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(out, [2, 2, 2, 3, 4, 5, 5, 5]);
//! # Ok::<(), sluice_dataset::DatasetError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use sluice_positions::Tag;

use crate::def::{Arg, DatasetDef, FnCall, FnKind};
use crate::error::DatasetError;
use crate::exec::files;
use crate::exec::stream::ElementIter;
use crate::formats::{file_function, FileFormat};
use crate::io::DataRoots;
use crate::python::SharedPythonExecutor;
use crate::tensor::Element;

/// A map function: takes an element and the call's constant arguments.
pub type MapFn = Arc<dyn Fn(Element, &[Arg]) -> Result<Element, String> + Send + Sync>;
/// A map function that also sees where its element comes from ([`ElementKey`]):
/// how the executor calls every map (a [`MapFn`] is wrapped into one), and how the
/// built-in maps with seeded randomness are registered.
pub(crate) type KeyedMapFn =
    Arc<dyn Fn(Element, &[Arg], ElementKey<'_>) -> Result<Element, String> + Send + Sync>;
/// A filter predicate: `Ok(true)` keeps the element.
pub type FilterFn = Arc<dyn Fn(&Element, &[Arg]) -> Result<bool, String> + Send + Sync>;
/// A dataset function: makes a stream of elements of one input element (what
/// `flat_map` and `interleave` call, e.g. `tfrecord` opens the file it names).
pub type DatasetFn = Arc<dyn Fn(Element, &[Arg]) -> Result<ElementIter, String> + Send + Sync>;
/// An optional check of a call's constant arguments, run by `check_call` (used by
/// built-ins whose arguments can be rejected before any element flows).
pub(crate) type ArgCheck = fn(&[Arg]) -> Result<(), String>;

/// What identifies an element to a map function with seeded randomness, so that
/// computing the element again (a worker died and its split is replayed) draws the
/// same numbers (docs/dataset-spec.md, "Seeded randomness").
#[derive(Clone, Copy, Debug)]
pub(crate) enum ElementKey<'a> {
    /// A tagged (exactly-once) pipeline: the source records the element stands for,
    /// the same whichever worker computes it.
    Origin(&'a Tag),
    /// Untagged: the element's position among those its map stage has taken since
    /// the pipeline started, counted from 0 and on through every epoch of a `repeat`.
    Index(u64),
}

/// One registered function with the numbers of arguments it takes (one number for
/// most; a range for built-ins with optional trailing arguments).
#[derive(Clone)]
struct Entry<F> {
    arity: RangeInclusive<usize>,
    f: F,
    check: Option<ArgCheck>,
    /// A map that reads its element's bytes (a decoder): its failure means the
    /// element's data is bad, an element error, not the end of the stream.
    per_element: bool,
}

/// A dataset function: registered code, or a built-in file reader, which the
/// registry binds to its data roots when asked for it.
#[derive(Clone)]
enum DatasetEntry {
    Custom(DatasetFn),
    File(FileFormat),
}

/// Named map and filter functions, and the data roots under which the built-in
/// file functions and file sources read. Cheap to clone (the functions are shared).
#[derive(Clone)]
pub struct FunctionRegistry {
    maps: BTreeMap<String, Entry<KeyedMapFn>>,
    filters: BTreeMap<String, Entry<FilterFn>>,
    datasets: BTreeMap<String, Entry<DatasetEntry>>,
    data_roots: DataRoots,
    /// What runs Python stages: a worker's process pool (`--allow-python`); `None`
    /// in a process that may not run user code (its Python stages then fail).
    python: Option<SharedPythonExecutor>,
    /// Elements `ignore_errors` stages skipped, over every pipeline run with this
    /// registry (and its clones): the worker's metric and status figure.
    errors_ignored: Arc<AtomicU64>,
}

impl FunctionRegistry {
    /// A registry with no functions at all.
    pub fn empty() -> Self {
        FunctionRegistry {
            maps: BTreeMap::new(),
            filters: BTreeMap::new(),
            datasets: BTreeMap::new(),
            data_roots: DataRoots::unrestricted(),
            python: None,
            errors_ignored: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Registers a map function taking exactly `arity` arguments, replacing any map
    /// function of the same name.
    pub fn register_map(
        &mut self,
        name: &str,
        arity: usize,
        f: impl Fn(Element, &[Arg]) -> Result<Element, String> + Send + Sync + 'static,
    ) {
        self.register_keyed_map(name, arity..=arity, move |e, args, _| f(e, args));
    }

    /// Registers a map function taking `arity` arguments that also sees its
    /// element's [`ElementKey`] (the built-ins with seeded randomness).
    pub(crate) fn register_keyed_map(
        &mut self,
        name: &str,
        arity: RangeInclusive<usize>,
        f: impl Fn(Element, &[Arg], ElementKey<'_>) -> Result<Element, String> + Send + Sync + 'static,
    ) {
        self.maps.insert(
            name.to_string(),
            Entry { arity, f: Arc::new(f), check: None, per_element: false },
        );
    }

    /// Registers a filter predicate taking exactly `arity` arguments, replacing any
    /// filter of the same name.
    pub fn register_filter(
        &mut self,
        name: &str,
        arity: usize,
        f: impl Fn(&Element, &[Arg]) -> Result<bool, String> + Send + Sync + 'static,
    ) {
        let arity = arity..=arity;
        self.filters.insert(
            name.to_string(),
            Entry { arity, f: Arc::new(f), check: None, per_element: false },
        );
    }

    /// Registers a dataset function taking exactly `arity` arguments, replacing any
    /// dataset function of the same name.
    pub fn register_dataset_fn(
        &mut self,
        name: &str,
        arity: usize,
        f: impl Fn(Element, &[Arg]) -> Result<ElementIter, String> + Send + Sync + 'static,
    ) {
        let f = DatasetEntry::Custom(Arc::new(f));
        self.datasets.insert(
            name.to_string(),
            Entry { arity: arity..=arity, f, check: None, per_element: false },
        );
    }

    /// Registers the built-in file reader `name` (see `exec::files::file_function`).
    pub(crate) fn register_file_fn(&mut self, name: &str) {
        if let Some(format) = file_function(name) {
            let f = DatasetEntry::File(format);
            self.datasets.insert(
                name.to_string(),
                Entry { arity: 0..=0, f, check: None, per_element: false },
            );
        }
    }

    /// This registry with its file sources and built-in file functions reading only
    /// under `roots`. A worker sets its configured roots here; the default
    /// ([`DataRoots::unrestricted`]) suits a program reading its own files.
    pub fn with_data_roots(mut self, roots: DataRoots) -> Self {
        self.data_roots = roots;
        self
    }

    /// This registry with Python stages run by `executor`.
    pub fn with_python(mut self, executor: SharedPythonExecutor) -> Self {
        self.python = Some(executor);
        self
    }

    /// The executor of Python stages, if this process may run them.
    pub fn python(&self) -> Option<&SharedPythonExecutor> {
        self.python.as_ref()
    }

    /// The counter of elements skipped by `ignore_errors` (shared by clones).
    pub fn errors_ignored(&self) -> &Arc<AtomicU64> {
        &self.errors_ignored
    }

    /// The roots the registry's file readers read under.
    pub fn data_roots(&self) -> &DataRoots {
        &self.data_roots
    }

    /// Attaches an argument check to an already registered function.
    pub(crate) fn set_arg_check(&mut self, kind: FnKind, name: &str, check: ArgCheck) {
        match kind {
            FnKind::Map => {
                if let Some(e) = self.maps.get_mut(name) {
                    e.check = Some(check);
                }
            }
            FnKind::Filter => {
                if let Some(e) = self.filters.get_mut(name) {
                    e.check = Some(check);
                }
            }
            FnKind::Dataset => {
                if let Some(e) = self.datasets.get_mut(name) {
                    e.check = Some(check);
                }
            }
        }
    }

    pub fn has(&self, kind: FnKind, name: &str) -> bool {
        match kind {
            FnKind::Map => self.maps.contains_key(name),
            FnKind::Filter => self.filters.contains_key(name),
            FnKind::Dataset => self.datasets.contains_key(name),
        }
    }

    /// Sorted names in the form `map:square`, `filter:mod_eq`: what a worker
    /// advertises to the dispatcher.
    pub fn names(&self) -> Vec<String> {
        let maps = self.maps.keys().map(|n| format!("map:{n}"));
        let filters = self.filters.keys().map(|n| format!("filter:{n}"));
        let datasets = self.datasets.keys().map(|n| format!("dataset:{n}"));
        let mut names: Vec<String> = maps.chain(filters).chain(datasets).collect();
        names.sort();
        names
    }

    /// The map function `name`, if registered.
    pub(crate) fn map_fn(&self, name: &str) -> Option<&KeyedMapFn> {
        self.maps.get(name).map(|e| &e.f)
    }

    /// Marks the map `name` a decoder: its failures are the element's (bad
    /// data), which `ignore_errors` may skip (`DatasetError::BadInput`).
    pub(crate) fn set_fails_per_element(&mut self, name: &str) {
        if let Some(e) = self.maps.get_mut(name) {
            e.per_element = true;
        }
    }

    /// Whether the map `name`'s failures are element errors.
    pub(crate) fn map_fails_per_element(&self, name: &str) -> bool {
        self.maps.get(name).is_some_and(|e| e.per_element)
    }

    /// The filter predicate `name`, if registered.
    pub(crate) fn filter_fn(&self, name: &str) -> Option<&FilterFn> {
        self.filters.get(name).map(|e| &e.f)
    }

    /// The dataset function `name`, if registered (a file reader bound to the
    /// registry's data roots).
    pub(crate) fn dataset_fn(&self, name: &str) -> Option<DatasetFn> {
        self.datasets.get(name).map(|e| match &e.f {
            DatasetEntry::Custom(f) => f.clone(),
            DatasetEntry::File(format) => {
                let (format, roots) = (*format, self.data_roots.clone());
                Arc::new(move |e: Element, _: &[Arg]| {
                    Ok(files::elements(files::file_name(&e)?, format, roots.clone()))
                })
            }
        })
    }

    fn lookup(
        &self,
        kind: FnKind,
        name: &str,
    ) -> Option<(RangeInclusive<usize>, Option<ArgCheck>)> {
        match kind {
            FnKind::Map => self.maps.get(name).map(|e| (e.arity.clone(), e.check)),
            FnKind::Filter => self.filters.get(name).map(|e| (e.arity.clone(), e.check)),
            FnKind::Dataset => self.datasets.get(name).map(|e| (e.arity.clone(), e.check)),
        }
    }

    fn known(&self, kind: FnKind) -> String {
        let names: Vec<&str> = match kind {
            FnKind::Map => self.maps.keys().map(String::as_str).collect(),
            FnKind::Filter => self.filters.keys().map(String::as_str).collect(),
            FnKind::Dataset => self.datasets.keys().map(String::as_str).collect(),
        };
        if names.is_empty() {
            "(none)".to_string()
        } else {
            names.join(", ")
        }
    }

    /// Checks one call: the function exists for `kind` and takes `call.args.len()`
    /// arguments (built-ins with optional trailing arguments take a range). Argument *types* are checked when the function runs (built-ins
    /// also reject impossible constants here, e.g. `mod_eq` with modulus 0).
    pub fn check_call(&self, kind: FnKind, call: &FnCall) -> Result<(), DatasetError> {
        let Some((arity, check)) = self.lookup(kind, &call.name) else {
            return Err(DatasetError::UnknownFunction {
                kind: kind.name().to_string(),
                name: call.name.clone(),
                known: self.known(kind),
            });
        };
        if !arity.contains(&call.args.len()) {
            let (least, most) = (*arity.start(), *arity.end());
            let plural = if most == 1 { "" } else { "s" };
            let expected = if least == most {
                format!("{most} argument{plural}")
            } else {
                format!("{least} to {most} arguments")
            };
            return Err(DatasetError::BadArguments {
                name: call.name.clone(),
                message: format!("expected {expected}, got {}", call.args.len()),
            });
        }
        if let Some(check) = check {
            check(&call.args).map_err(|message| DatasetError::BadArguments {
                name: call.name.clone(),
                message,
            })?;
        }
        Ok(())
    }

    /// [`DatasetDef::validate`] and then [`Self::check_call`] for every call.
    pub fn check(&self, def: &DatasetDef) -> Result<(), DatasetError> {
        def.validate()?;
        def.function_calls().iter().try_for_each(|(_, kind, call)| self.check_call(*kind, call))
    }
}

impl fmt::Debug for FunctionRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FunctionRegistry")
            .field("functions", &self.names())
            .field("data_roots", &format_args!("{}", self.data_roots))
            .finish()
    }
}
