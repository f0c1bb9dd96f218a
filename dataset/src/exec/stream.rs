//! The types every stage of the executor shares: the element stream
//! ([`ElementIter`]), the splits a DYNAMIC-mode source reads ([`SplitRange`],
//! [`SplitProvider`]), a nested pipeline started on first use ([`Deferred`]), and
//! `lock` for the mutexes stages share (an RNG, the split provider).
//!
//! Why a module of its own: the plan and every stage module use these; as a leaf,
//! no stage has to reach back into the executor's facade (`exec`) for them, and the
//! registry can name [`ElementIter`] in its dataset-function type without depending
//! on the executor.

use std::sync::{Arc, Mutex, MutexGuard};

use sluice_positions::Run;

use crate::error::DatasetError;
use crate::tensor::Element;

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
    /// Exactly-once jobs: the consumed records of the units of the split
    /// `next_split` returned last, which a tagged source does not produce again
    /// (`GetSplitResponse.split.skip_runs`). Called once per split, right after
    /// `next_split`; providers without skips keep this default.
    fn take_skip_runs(&mut self) -> Vec<Run> {
        Vec::new()
    }
}

/// One provider shared by every instantiation of the source (a `repeat` rebuilds
/// it each epoch). The lock is held only for one `next_split`/`reset` call, and only
/// the executor's thread(s) of one pipeline take it.
pub(super) type SharedSplits = Arc<Mutex<Box<dyn SplitProvider>>>;

/// A pipeline to start when first needed.
pub(crate) type Deferred = Box<dyn FnOnce() -> Result<ElementIter, DatasetError> + Send>;

/// Locks a mutex, ignoring poisoning: the guarded values (an RNG, a split provider)
/// stay usable after a panic elsewhere, and the executor never panics holding them.
pub(super) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
