//! The executor: turns a [`DatasetDef`] into a pull-based iterator of elements.
//!
//! It is synchronous on purpose: a worker runs it on a dedicated thread (per task)
//! and hands elements to its async side over a bounded channel, and tests run the
//! very same code locally as the oracle. Each stage is one iterator pulling from the
//! one before it:
//!
//! ```text
//!   source ──▶ map ──▶ filter ──▶ batch ──▶ shuffle ──▶ repeat ──▶ … ──▶ consumer
//!     ▲                                                   │
//!     │ SplitProvider (DYNAMIC mode)   re-instantiates its upstream each epoch,
//!     └──────────────── reset() ◀─────────────────────────┘ resetting the provider
//! ```
//!
//! A `Plan` holds what outlives one instantiation of a stage: the stages, the
//! registry, the shared split provider and each shuffle's RNG (kept across
//! repeats so that every epoch is shuffled differently but reproducibly, like
//! tf.data's `reshuffle_each_iteration=True`). Every stage is wrapped in a fuse:
//! after the first error or the end, it yields nothing more.
//!
//! Memory is bounded by the definition: a shuffle holds `buffer_size` elements, a
//! batch `size`, a prefetch `buffer_size` (capped at [`MAX_PREFETCH`]).

mod batch;
mod ops;
mod prefetch;
mod repeat;
mod shuffle;
mod source;

use std::sync::{Arc, Mutex, MutexGuard};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::def::{DatasetDef, FnKind, Stage};
use crate::error::DatasetError;
use crate::registry::FunctionRegistry;
use crate::tensor::Element;

pub use prefetch::MAX_PREFETCH;

/// A running pipeline: elements until the end, or until (and including) the first
/// error.
pub type ElementIter = Box<dyn Iterator<Item = Result<Element, DatasetError>> + Send>;

/// A half-open range `[begin, end)` of source element indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitRange {
    pub begin: u64,
    pub end: u64,
}

/// Where a DYNAMIC-mode source gets its splits (the worker implements it with
/// GetSplit RPCs to the dispatcher).
pub trait SplitProvider: Send {
    /// The next split of the current epoch, `None` when this epoch has no more splits.
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError>;
    /// Move to the next epoch (called when a `repeat` restarts its input).
    fn reset(&mut self) -> Result<(), DatasetError>;
}

/// One provider shared by every instantiation of the source (a `repeat` rebuilds
/// it each epoch). The lock is held only for one `next_split`/`reset` call, and only
/// the executor's thread(s) of one pipeline take it.
type SharedSplits = Arc<Mutex<Box<dyn SplitProvider>>>;

impl DatasetDef {
    /// Runs the whole pipeline in this process: the oracle for tests and local runs.
    pub fn iter_local(&self, registry: &FunctionRegistry) -> Result<ElementIter, DatasetError> {
        Plan::start(self, registry, None)
    }

    /// Like [`Self::iter_local`], but the source produces only the elements of the
    /// splits `splits` hands out: for each split in order, source elements
    /// `begin..end`.
    pub fn iter_with_splits(
        &self,
        registry: &FunctionRegistry,
        splits: Box<dyn SplitProvider>,
    ) -> Result<ElementIter, DatasetError> {
        Plan::start(self, registry, Some(Arc::new(Mutex::new(splits))))
    }
}

/// Everything an instantiation of a stage needs, shared by all of them.
struct Plan {
    stages: Vec<Stage>,
    registry: FunctionRegistry,
    splits: Option<SharedSplits>,
    /// Per stage: the RNG of a shuffle stage, seeded once per pipeline.
    rngs: Vec<Option<Arc<Mutex<ChaCha8Rng>>>>,
}

impl Plan {
    fn start(
        def: &DatasetDef,
        registry: &FunctionRegistry,
        splits: Option<SharedSplits>,
    ) -> Result<ElementIter, DatasetError> {
        registry.check(def)?;
        let rngs = def
            .stages
            .iter()
            .map(|s| match s {
                Stage::Shuffle { seed, .. } => {
                    Some(Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(*seed))))
                }
                _ => None,
            })
            .collect();
        let plan =
            Arc::new(Plan { stages: def.stages.clone(), registry: registry.clone(), splits, rngs });
        Ok(plan.build(plan.stages.len()))
    }

    /// Whether a `repeat` should stop after an epoch that yielded nothing. Locally
    /// every epoch is the same, so an empty one means all are (tf.data stops too).
    /// With splits an empty epoch may just mean other workers took its splits, so
    /// only a source that can never produce anything stops the repeat.
    fn stop_on_empty_epoch(&self) -> bool {
        self.splits.is_none() || self.source_cardinality() == 0
    }

    fn source_cardinality(&self) -> u64 {
        self.stages.first().map_or(0, source::cardinality)
    }

    /// A fresh iterator over the output of `stages[..end]`.
    fn build(self: &Arc<Self>, end: usize) -> ElementIter {
        let Some(stage) = end.checked_sub(1).and_then(|i| self.stages.get(i)) else {
            return Box::new(std::iter::empty());
        };
        if end == 1 {
            return Box::new(ops::Fuse::new(Box::new(source::Source::new(self.clone()))));
        }
        let input = || self.build(end - 1);
        let it: ElementIter = match stage {
            Stage::Range { .. } | Stage::FromTensorSlices(_) => {
                // `validate` guarantees sources only come first.
                Box::new(std::iter::empty())
            }
            Stage::Map(call) => match self.registry.map_fn(&call.name) {
                Some(f) => Box::new(ops::Map::new(input(), call.clone(), f.clone())),
                None => Box::new(std::iter::once(Err(self.unknown(FnKind::Map, &call.name)))),
            },
            Stage::Filter(call) => match self.registry.filter_fn(&call.name) {
                Some(f) => Box::new(ops::Filter::new(input(), call.clone(), f.clone())),
                None => Box::new(std::iter::once(Err(self.unknown(FnKind::Filter, &call.name)))),
            },
            Stage::Batch { size, drop_remainder } => {
                Box::new(batch::Batch::new(input(), *size, *drop_remainder))
            }
            Stage::Shuffle { buffer_size, seed } => {
                let rng = self
                    .rngs
                    .get(end - 1)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(*seed))));
                Box::new(shuffle::Shuffle::new(input(), *buffer_size, rng))
            }
            Stage::Repeat { count } => Box::new(repeat::Repeat::new(self.clone(), end - 1, *count)),
            Stage::Take { count } => Box::new(ops::Take::new(input(), *count)),
            Stage::Skip { count } => Box::new(ops::Skip::new(input(), *count)),
            Stage::Prefetch { buffer_size } => {
                Box::new(prefetch::Prefetch::new(input(), *buffer_size))
            }
        };
        Box::new(ops::Fuse::new(it))
    }

    /// Unreachable after `registry.check`; kept as an error rather than a panic.
    fn unknown(&self, kind: FnKind, name: &str) -> DatasetError {
        DatasetError::UnknownFunction {
            kind: kind.name().to_string(),
            name: name.to_string(),
            known: "(see FunctionRegistry::names)".to_string(),
        }
    }

    /// Moves the split provider to its next epoch (no-op without splits).
    fn reset_splits(&self) -> Result<(), DatasetError> {
        match &self.splits {
            Some(s) => lock(s).reset(),
            None => Ok(()),
        }
    }
}

/// Locks a mutex, ignoring poisoning: the guarded values (an RNG, a split provider)
/// stay usable after a panic elsewhere, and the executor never panics holding them.
fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
