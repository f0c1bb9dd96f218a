//! The plan: what outlives one instantiation of a stage (the stages, the registry,
//! the shared split provider, each shuffle's RNG, a bytes or tensors source's
//! prepared values), and
//! `Plan::build`, which instantiates `stages[..end]` as a chain of stage iterators,
//! each wrapped in a fuse.
//!
//! Why a module of its own: the facade (`exec`) only starts a plan; the stages that
//! rebuild or read it (`repeat` re-instantiates its upstream each epoch, `source`
//! reads the stages and the split provider) use it from here.
//!
//! `plan`, `repeat` and `source` still depend on each other: `Plan::build` constructs
//! them and they read or rebuild the plan (a `repeat` restarts its upstream through
//! `Plan::build`). Breaking that needs an interface between them, not a move (issue 12).

use crate::formats::parquet::ParquetReader;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::slices::Slicer;
use super::stream::{lock, Deferred, ElementIter, SharedSplits};
use super::tagging::{Dropped, Tags};
use super::{
    batch, combine, example, interleave, ops, parallel_map, prefetch, python, repeat, shuffle,
    source,
};
use crate::def::{DatasetDef, FnCall, FnKind, ShardArg, SliceValues, Stage};
use crate::error::DatasetError;
use crate::registry::{DatasetFn, FunctionRegistry};

/// Everything an instantiation of a stage needs, shared by all of them.
pub(super) struct Plan {
    pub(super) stages: Vec<Stage>,
    pub(super) registry: FunctionRegistry,
    pub(super) splits: Option<SharedSplits>,
    /// Per stage: the RNG of a shuffle stage, seeded once per pipeline.
    rngs: Vec<Option<Arc<Mutex<ChaCha8Rng>>>>,
    /// Per stage: how many elements a map stage has taken since the pipeline
    /// started, kept across its instantiations (every epoch of a `repeat`): the
    /// `ElementKey::Index` of an untagged pipeline's seeded maps.
    taken: Vec<Arc<AtomicU64>>,
    /// The tensors of a `from_tensor_slices` source of bytes, built once per
    /// pipeline: an element is then a reference to its buffer, not a copy of it
    /// (a large constant tensor costs no copy per element or per epoch).
    pub(super) byte_slices: Option<Vec<crate::tensor::Tensor>>,
    /// The rows of a `from_tensor_slices` source of `tensors`, likewise sliced out
    /// of the payloads rather than copied.
    pub(super) tensor_slices: Option<Slicer>,
    /// A `parquet` source's reader (it keeps the last file's footer).
    pub(super) parquet: Option<Arc<ParquetReader>>,
    /// A tagged pipeline's sink and skips (`tagging`); `None` untagged.
    pub(super) tags: Option<Arc<Tags>>,
}

impl Plan {
    pub(super) fn start(
        def: &DatasetDef,
        registry: &FunctionRegistry,
        splits: Option<SharedSplits>,
        tags: Option<Tags>,
    ) -> Result<ElementIter, DatasetError> {
        registry.check(def)?;
        // A local run lists its own files; a worker's copy must arrive resolved (the
        // dispatcher resolves it once, so that every worker splits the same list).
        let resolved;
        let def = if def.has_unresolved_files() {
            let first = def.stages.first();
            if splits.is_some()
                && matches!(first, Some(Stage::ListFiles { .. } | Stage::Parquet(_)))
            {
                return Err(DatasetError::InvalidSpec {
                    field: format!("stages[0].{}", first.map_or("", Stage::op_name)),
                    message: "not resolved: with splits the file list (and a Parquet source's \
                              row groups) must come resolved (DatasetDef::resolve_files, done by \
                              the dispatcher)"
                        .into(),
                });
            }
            let mut copy = def.clone();
            copy.resolve_files_in(registry.data_roots())?;
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
        let taken = def.stages.iter().map(|_| Arc::default()).collect();
        let byte_slices = match def.stages.first() {
            Some(Stage::FromTensorSlices(SliceValues::Bytes(values))) => {
                Some(values.iter().map(|v| crate::tensor::Tensor::scalar_bytes(v)).collect())
            }
            _ => None,
        };
        let tensor_slices = match def.stages.first() {
            Some(Stage::FromTensorSlices(SliceValues::Tensors { tensors, names })) => {
                Some(Slicer::new(tensors, names.as_deref())?)
            }
            _ => None,
        };
        let parquet = match def.stages.first() {
            Some(Stage::Parquet(p)) => {
                Some(Arc::new(ParquetReader::new(p.clone(), registry.data_roots().clone())))
            }
            _ => None,
        };
        let plan = Arc::new(Plan {
            stages: def.stages.clone(),
            registry: registry.clone(),
            splits,
            rngs,
            taken,
            byte_slices,
            tensor_slices,
            parquet,
            tags: tags.map(Arc::new),
        });
        Ok(plan.build(plan.stages.len()))
    }

    /// Whether a `repeat` should stop after an epoch that yielded nothing. Locally
    /// every epoch is the same, so an empty one means all are (tf.data stops too).
    /// With splits an empty epoch may just mean other workers took its splits, so
    /// only a source that can never produce anything stops the repeat.
    pub(super) fn stop_on_empty_epoch(&self) -> bool {
        self.splits.is_none() || self.source_cardinality() == 0
    }

    pub(super) fn source_cardinality(&self) -> u64 {
        self.stages.first().map_or(0, source::cardinality)
    }

    /// A fresh iterator over the output of `stages[..end]`.
    pub(super) fn build(self: &Arc<Self>, end: usize) -> ElementIter {
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
            | Stage::TextLines { .. }
            | Stage::WebDataset { .. }
            | Stage::Parquet(_) => {
                // `validate` guarantees sources only come first.
                Box::new(std::iter::empty())
            }
            Stage::Map { name, args, num_parallel_calls, deterministic } => {
                match self.registry.map_fn(name) {
                    Some(f) => {
                        let call = FnCall::new(name.clone(), args.clone());
                        let taken = self.taken.get(end - 1).cloned().unwrap_or_default();
                        let failure = if self.registry.map_fails_per_element(name) {
                            ops::Failure::OfElement(self.dropped(end))
                        } else {
                            ops::Failure::Ends
                        };
                        match parallelism(*num_parallel_calls) {
                            1 => Box::new(ops::Map::new(input(), call, f.clone(), taken, failure)),
                            n => Box::new(parallel_map::ParallelMap::new(
                                input(),
                                call,
                                f.clone(),
                                taken,
                                n,
                                *deterministic,
                                failure,
                            )),
                        }
                    }
                    None => Box::new(std::iter::once(Err(self.unknown(FnKind::Map, name)))),
                }
            }
            Stage::Filter(call) => match self.registry.filter_fn(&call.name) {
                Some(f) => {
                    Box::new(ops::Filter::new(input(), call.clone(), f.clone(), self.dropped(end)))
                }
                None => Box::new(std::iter::once(Err(self.unknown(FnKind::Filter, &call.name)))),
            },
            Stage::Batch { size, drop_remainder } => {
                Box::new(batch::Batch::new(input(), *size, *drop_remainder, self.dropped(end)))
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
                    self.expansion_fn(f, end),
                    interleave::Shape { cycle_length: 1, block_length: 1, parallelism: 1 },
                )),
                None => Box::new(std::iter::once(Err(self.unknown(FnKind::Dataset, &call.name)))),
            },
            Stage::Interleave { name, args, cycle_length, block_length, num_parallel_calls } => {
                match self.registry.dataset_fn(name) {
                    Some(f) => Box::new(interleave::Interleave::new(
                        input(),
                        FnCall::new(name.clone(), args.clone()),
                        self.expansion_fn(f, end),
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
            Stage::Python(stage) => Box::new(python::PythonMap::new(
                input(),
                self.registry.python().cloned(),
                stage.clone(),
                format!("stages[{}]", end - 1),
                self.dropped(end),
            )),
            Stage::IgnoreErrors {} => {
                Box::new(ops::IgnoreErrors::new(input(), self.registry.errors_ignored().clone()))
            }
        };
        Box::new(ops::Fuse::new(it))
    }

    /// A nested pipeline (`zip`, `concatenate`) started on first use, with this
    /// plan's registry and no split provider: nested sources are not split.
    fn deferred(&self, def: DatasetDef) -> Deferred {
        let registry = self.registry.clone();
        Box::new(move || Plan::start(&def, &registry, None, None))
    }

    /// How the stage `stages[end - 1]` reports what it drops, when tagged.
    fn dropped(&self, end: usize) -> Option<Dropped> {
        self.tags.as_ref().map(|t| t.dropped_at(end - 1))
    }

    /// The dataset function of the expansion `stages[end - 1]`, numbering its
    /// records when tagged.
    fn expansion_fn(&self, f: DatasetFn, end: usize) -> DatasetFn {
        match &self.tags {
            Some(tags) => tags.expansion_fn(f, end - 1),
            None => f,
        }
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
    pub(super) fn reset_splits(&self) -> Result<(), DatasetError> {
        match &self.splits {
            Some(s) => lock(s).reset(),
            None => Ok(()),
        }
    }
}

/// Threads for a `num_parallel_calls`: 0 means one per core.
fn parallelism(num_parallel_calls: u32) -> usize {
    match num_parallel_calls {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}
