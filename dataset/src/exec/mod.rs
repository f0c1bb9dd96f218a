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
mod combine;
mod example;
pub(crate) mod files;
mod interleave;
mod ops;
mod parallel_map;
mod prefetch;
mod repeat;
mod shuffle;
mod source;

use std::sync::{Arc, Mutex, MutexGuard};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::def::{DatasetDef, FnCall, FnKind, ShardArg, Stage};
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
    /// The tensors of a `from_tensor_slices` source of bytes, built once per
    /// pipeline: an element is then a reference to its buffer, not a copy of it
    /// (a large constant tensor costs no copy per element or per epoch).
    byte_slices: Option<Vec<crate::tensor::Tensor>>,
}

impl Plan {
    fn start(
        def: &DatasetDef,
        registry: &FunctionRegistry,
        splits: Option<SharedSplits>,
    ) -> Result<ElementIter, DatasetError> {
        registry.check(def)?;
        // A local run lists its own files; a worker's copy must arrive resolved (the
        // dispatcher resolves it once, so that every worker splits the same list).
        let resolved;
        let def = if def.has_unresolved_files() {
            if splits.is_some() && matches!(def.stages.first(), Some(Stage::ListFiles { .. })) {
                return Err(DatasetError::InvalidSpec {
                    field: "stages[0].list_files.files".into(),
                    message: "not resolved: with splits the file list must come resolved \
                              (DatasetDef::resolve_files, done by the dispatcher)"
                        .into(),
                });
            }
            let mut copy = def.clone();
            copy.resolve_files()?;
            resolved = copy;
            &resolved
        } else {
            def
        };
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
        let byte_slices = match def.stages.first() {
            Some(Stage::FromTensorSlices(crate::def::SliceValues::Bytes(values))) => {
                Some(values.iter().map(|v| crate::tensor::Tensor::scalar_bytes(v)).collect())
            }
            _ => None,
        };
        let plan = Arc::new(Plan {
            stages: def.stages.clone(),
            registry: registry.clone(),
            splits,
            rngs,
            byte_slices,
        });
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
            Stage::Range { .. }
            | Stage::FromTensorSlices(_)
            | Stage::ListFiles { .. }
            | Stage::TfRecord { .. }
            | Stage::TextLines { .. } => {
                // `validate` guarantees sources only come first.
                Box::new(std::iter::empty())
            }
            Stage::Map { name, args, num_parallel_calls, deterministic } => {
                match self.registry.map_fn(name) {
                    Some(f) => {
                        let call = FnCall::new(name.clone(), args.clone());
                        match parallelism(*num_parallel_calls) {
                            1 => Box::new(ops::Map::new(input(), call, f.clone())),
                            n => Box::new(parallel_map::ParallelMap::new(
                                input(),
                                call,
                                f.clone(),
                                n,
                                *deterministic,
                            )),
                        }
                    }
                    None => Box::new(std::iter::once(Err(self.unknown(FnKind::Map, name)))),
                }
            }
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
            Stage::FlatMap(call) => match self.registry.dataset_fn(&call.name) {
                Some(f) => Box::new(interleave::Interleave::new(
                    input(),
                    call.clone(),
                    f.clone(),
                    interleave::Shape { cycle_length: 1, block_length: 1, parallelism: 1 },
                )),
                None => Box::new(std::iter::once(Err(self.unknown(FnKind::Dataset, &call.name)))),
            },
            Stage::Interleave { name, args, cycle_length, block_length, num_parallel_calls } => {
                match self.registry.dataset_fn(name) {
                    Some(f) => Box::new(interleave::Interleave::new(
                        input(),
                        FnCall::new(name.clone(), args.clone()),
                        f.clone(),
                        interleave::Shape {
                            cycle_length: *cycle_length as usize,
                            block_length: *block_length as usize,
                            parallelism: parallelism(*num_parallel_calls),
                        },
                    )),
                    None => Box::new(std::iter::once(Err(self.unknown(FnKind::Dataset, name)))),
                }
            }
            Stage::Zip { datasets } => {
                let others: Vec<Deferred> =
                    datasets.iter().map(|d| self.deferred(d.clone())).collect();
                Box::new(combine::Zip::new(input(), others))
            }
            Stage::Concatenate { dataset } => {
                Box::new(combine::Concatenate::new(input(), self.deferred((**dataset).clone())))
            }
            Stage::Enumerate { start } => Box::new(combine::Enumerate::new(input(), *start)),
            Stage::Shard { num_shards, index } => {
                // Outside HINT sharding (which rewrites it on the worker) the
                // placeholder means one shard: the whole stream.
                let value = |a: &ShardArg, hint: u64| match a {
                    ShardArg::Value(v) => *v,
                    ShardArg::Hint => hint,
                };
                Box::new(combine::Shard::new(input(), value(num_shards, 1), value(index, 0)))
            }
            Stage::ParseExample { features } => {
                Box::new(example::ParseExample::new(input(), features.clone()))
            }
        };
        Box::new(ops::Fuse::new(it))
    }

    /// A nested pipeline (`zip`, `concatenate`) started on first use, with this
    /// plan's registry and no split provider: nested sources are not split.
    fn deferred(&self, def: DatasetDef) -> Deferred {
        let registry = self.registry.clone();
        Box::new(move || Plan::start(&def, &registry, None))
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

/// A pipeline to start when first needed.
pub(crate) type Deferred = Box<dyn FnOnce() -> Result<ElementIter, DatasetError> + Send>;

/// Threads for a `num_parallel_calls`: 0 means one per core.
fn parallelism(num_parallel_calls: u32) -> usize {
    match num_parallel_calls {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}

/// Locks a mutex, ignoring poisoning: the guarded values (an RNG, a split provider)
/// stay usable after a panic elsewhere, and the executor never panics holding them.
fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
