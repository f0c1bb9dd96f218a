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
//!
//! This module is the facade: [`DatasetDef::iter_local`] and
//! [`DatasetDef::iter_with_splits`] start a plan. `stream` holds the types every stage
//! shares ([`ElementIter`], [`SplitRange`], [`SplitProvider`]), `plan` the `Plan` and its
//! `build`; one module per stage (`source`, with `slices` for the rows of a `tensors`
//! source, `ops` for map/filter/take/skip and the fuse,
//! `parallel_map`, `batch`, `shuffle`, `repeat`, `prefetch`, `interleave` for
//! flat_map/interleave, `combine` for zip/concatenate/enumerate/shard, `example`),
//! `tagging` (origins of an exactly-once pipeline: [`DatasetDef::iter_tagged`]), and
//! `files`, the readers of file sources that `builtins`' dataset functions use too.

mod batch;
mod combine;
mod example;
pub(crate) mod files;
mod interleave;
mod interleave_pool;
mod ops;
mod parallel_map;
mod plan;
mod prefetch;
mod python;
mod repeat;
mod shuffle;
mod slices;
mod source;
pub(crate) mod stream;
mod tagging;

use std::sync::{Arc, Mutex};

use crate::def::{DatasetDef, Stage};
use crate::error::DatasetError;
use crate::registry::FunctionRegistry;
use plan::Plan;
use stream::SharedSplits;
use tagging::Tags;

pub use prefetch::MAX_PREFETCH;
pub use stream::{ElementIter, SplitProvider, SplitRange};
pub use tagging::{DroppedSink, TaggedIter};

impl DatasetDef {
    /// Runs the whole pipeline in this process: the oracle for tests and local runs.
    pub fn iter_local(&self, registry: &FunctionRegistry) -> Result<ElementIter, DatasetError> {
        Plan::start(self, registry, None, None)
    }

    /// Like [`Self::iter_local`], but the source produces only the elements of the
    /// splits `splits` hands out: for each split in order, source elements
    /// `begin..end`.
    pub fn iter_with_splits(
        &self,
        registry: &FunctionRegistry,
        splits: Box<dyn SplitProvider>,
    ) -> Result<ElementIter, DatasetError> {
        Plan::start(self, registry, Some(Arc::new(Mutex::new(splits))), None)
    }

    /// Runs the pipeline with origins (an exactly-once task, docs/exactly-once.md):
    /// every element carries the source records it stands for, and what the
    /// pipeline drops goes to the returned sink. With `splits`, the source reads
    /// their ranges and skips their skip runs; without, all of it. Meant for
    /// pipelines [`DatasetDef::exactly_once`] accepts.
    pub fn iter_tagged(
        &self,
        registry: &FunctionRegistry,
        splits: Option<Box<dyn SplitProvider>>,
    ) -> Result<TaggedIter, DatasetError> {
        let expansion = self
            .stages
            .iter()
            .position(|s| matches!(s, Stage::FlatMap(_) | Stage::Interleave { .. }));
        let tags = Tags::new(expansion);
        let dropped = tags.sink.clone();
        let splits = splits.map(|s| Arc::new(Mutex::new(s)) as SharedSplits);
        let elements = Plan::start(self, registry, splits, Some(tags))?;
        Ok(TaggedIter { elements, dropped })
    }
}
