//! Origins through a tagged pipeline (exactly-once jobs, docs/exactly-once.md).
//!
//! ```text
//!  source ──(unit, record)──▶ map … filter ──▶ expansion ──(unit, k)──▶ batch ──▶ …
//!    │ skips consumed records     │ dropped        │ skips, ends (unit, n)    │ remainder
//!    └──── unit ends ─────────────┴───────────────▶ DroppedSink ◀─────────────┘
//!                                  taken by whoever takes elements out (the worker)
//! ```
//!
//! Every element carries its `Element::origin`; a 1:1 stage moves it from its
//! input to its output, `batch` joins its inputs', `shuffle` and `prefetch` move
//! elements whole. What a stage drops (a filtered element, a failed Python call
//! `ignore_errors` skips, `batch`'s dropped remainder) and every `Counted` unit's
//! end go into the pipeline's one [`DroppedSink`]: the records are consumed
//! together with the next element taken out of the pipeline.
//!
//! Before an expansion (`flat_map` / `interleave` over one-element units), an
//! element's origin `(u, 0)` names unit `u` itself, not a record of it: a stage
//! there that drops it reports that `u` expands to no record (end `(u, 0)`).
//!
//! The skip runs of the splits (consumed records of re-granted units) are kept
//! in one set the source fills and the expansion reads, so the stage that
//! numbers the records skips them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sluice_positions::{Origin, RecordSet, Run, Tag};

use super::stream::{lock, ElementIter};
use crate::registry::DatasetFn;
use crate::tensor::Element;

/// The records a tagged pipeline dropped (and the unit ends it reported) since
/// they were last taken. Shared by every stage of one pipeline and by its reader.
#[derive(Clone, Default)]
pub struct DroppedSink(Arc<SinkInner>);

#[derive(Default)]
struct SinkInner {
    /// Set (under the lock) when something is added, cleared by a take: the
    /// worker takes the sink with every element, and most find it empty, so an
    /// empty take costs one atomic load instead of a lock.
    any: AtomicBool,
    origin: Mutex<Origin>,
}

impl DroppedSink {
    /// Everything dropped since the last take, leaving the sink empty. What
    /// another thread adds while this runs is taken by the next take.
    pub fn take(&self) -> Origin {
        if !self.0.any.load(Ordering::Acquire) {
            return Origin::default();
        }
        let mut origin = lock(&self.0.origin);
        self.0.any.store(false, Ordering::Release);
        std::mem::take(&mut *origin)
    }

    fn with(&self, f: impl FnOnce(&mut Origin)) {
        let mut origin = lock(&self.0.origin);
        f(&mut origin);
        if !origin.is_empty() {
            self.0.any.store(true, Ordering::Release);
        }
    }
}

/// A running tagged pipeline: its elements (each with its origin) and the sink
/// of what it dropped. Take the sink's content with every element taken out,
/// and once more after the end.
pub struct TaggedIter {
    pub elements: ElementIter,
    pub dropped: DroppedSink,
}

/// How a stage at a given position reports what it drops.
#[derive(Clone)]
pub(super) struct Dropped {
    sink: DroppedSink,
    /// The stage is before the expansion: an origin names a unit, not a record.
    before_expansion: bool,
}

impl Dropped {
    /// Records that `origin`'s records were dropped (no-op for `None`).
    pub(super) fn drop_origin(&self, origin: Option<Tag>) {
        let Some(origin) = origin else { return };
        self.sink.with(|sink| {
            if self.before_expansion {
                for run in origin.runs() {
                    sink.push_end(run.unit, 0);
                }
                sink.unit_ends.extend_from_slice(origin.unit_ends());
            } else {
                origin.append_to(sink);
            }
        });
    }

    /// Records that `unit` has `records` records.
    pub(super) fn end(&self, unit: u64, records: u64) {
        self.sink.with(|sink| sink.push_end(unit, records));
    }
}

/// What a tagged plan shares between its stages.
pub(super) struct Tags {
    pub(super) sink: DroppedSink,
    /// Consumed records of the granted units: never produced again.
    pub(super) skips: Arc<Skips>,
    /// Index of the `flat_map` / `interleave` stage, if any.
    pub(super) expansion: Option<usize>,
}

impl Tags {
    pub(super) fn new(expansion: Option<usize>) -> Self {
        Tags { sink: DroppedSink::default(), skips: Arc::default(), expansion }
    }

    /// The reporter of the stage at index `stage`.
    pub(super) fn dropped_at(&self, stage: usize) -> Dropped {
        Dropped {
            sink: self.sink.clone(),
            before_expansion: self.expansion.is_some_and(|x| stage < x),
        }
    }

    /// Adds a split's skip runs.
    pub(super) fn skip(&self, runs: Vec<Run>) {
        if runs.is_empty() {
            return;
        }
        let mut skips = lock(&self.skips.set);
        for run in runs {
            skips.insert(run);
        }
        self.skips.any.store(true, Ordering::Release);
    }

    /// The expansion's dataset function, numbering the records it makes of unit
    /// `u` as `(u, 0), (u, 1), …`, skipping consumed ones and reporting `(u, n)`
    /// at the end of the stream.
    pub(super) fn expansion_fn(&self, f: DatasetFn, stage: usize) -> DatasetFn {
        let dropped = self.dropped_at(stage);
        let skips = self.skips.clone();
        Arc::new(move |mut element: Element, args| {
            let unit = element.origin.take().and_then(|o| o.runs().first().map(|r| r.unit));
            let stream = f(element, args)?;
            Ok(match unit {
                Some(unit) => Box::new(Records {
                    inner: stream,
                    unit,
                    next: 0,
                    skips: skips.clone(),
                    dropped: dropped.clone(),
                    ended: false,
                }) as ElementIter,
                None => stream,
            })
        })
    }
}

/// The consumed records of the granted units. Most grants have none: then a
/// record costs one atomic load, not a lock.
#[derive(Default)]
pub(super) struct Skips {
    any: AtomicBool,
    set: Mutex<RecordSet>,
}

impl Skips {
    /// Whether `(unit, record)` was consumed already.
    pub(super) fn contains(&self, unit: u64, record: u64) -> bool {
        self.any.load(Ordering::Acquire) && lock(&self.set).contains(unit, record)
    }
}

/// The records of one unit as an expansion makes them.
struct Records {
    inner: ElementIter,
    unit: u64,
    next: u64,
    skips: Arc<Skips>,
    dropped: Dropped,
    ended: bool,
}

impl Iterator for Records {
    type Item = <ElementIter as Iterator>::Item;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.ended {
                return None;
            }
            let item = match self.inner.next() {
                Some(item) => item,
                None => {
                    self.ended = true;
                    self.dropped.end(self.unit, self.next);
                    return None;
                }
            };
            let record = self.next;
            self.next += 1;
            match item {
                Ok(_) if self.skips.contains(self.unit, record) => {}
                Ok(mut e) => {
                    e.origin = Some(Tag::record(self.unit, record));
                    return Some(Ok(e));
                }
                Err(e) => {
                    // An element error `ignore_errors` may skip: its record is
                    // consumed with the next element (or was already).
                    if e.is_element_error() {
                        if self.skips.contains(self.unit, record) {
                            continue;
                        }
                        self.dropped.drop_origin(Some(Tag::record(self.unit, record)));
                    }
                    return Some(Err(e));
                }
            }
        }
    }
}
