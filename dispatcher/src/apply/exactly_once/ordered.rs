//! `GetSplit` of a deterministic-order iteration (`crate::order`,
//! docs/exactly-once.md "Deterministic order"). As `grants.rs`, with:
//!
//! 1. one split per grant, numbered with its place `k` in the seeded order;
//!    the iteration's cursor counts places (`SplitCursor::next` is the next `k`);
//! 2. a ready orphan first, granted whole (from its first unit that is not whole
//!    to its end, every consumed record inside skipped) and with its split's `k`:
//!    a split is never read by two tasks at once, so its elements reach their
//!    consumer in source order;
//! 3. a split all of whose units are whole (a restored position consumed it) is
//!    still granted, empty, so its consumer learns that place `k` is done;
//! 4. no place beyond `order::window_end` of the consumed watermark: `Wait`
//!    (what bounds the splits in flight, hence what readers buffer).

use sluice_positions::Run;

use super::grants::{self, record, set_cursor, Ask};
use crate::command::Response;
use crate::exactly_once::Progress;
use crate::order::{self, Order, Place};
use crate::state::{IterationId, SplitAnswer, SplitCursor, SplitRecord, State, TaskId};

/// What a deterministic-order grant needs besides the request.
pub(crate) struct Shape {
    pub order: Order,
    pub units_per_split: u64,
    pub cardinality: u64,
}

impl Shape {
    /// The shape of `iteration_id`, if its job has a deterministic order.
    pub(crate) fn of(state: &State, iteration_id: IterationId) -> Option<Shape> {
        let it = state.iterations.get(&iteration_id)?;
        let order = state.exactly_once.order_of(it.job_id)?;
        let cardinality = state
            .jobs
            .get(&it.job_id)
            .and_then(|j| state.datasets.get(&j.dataset_id))
            .and_then(|d| d.source_cardinality)
            .unwrap_or(0);
        Some(Shape { order, units_per_split: it.elements_per_split.max(1), cardinality })
    }

    /// The place of a grant that starts at `unit` (an empty grant starts at its
    /// split's first unit), the consumed watermark being `watermark`.
    pub(crate) fn place(&self, unit: u64, watermark: u64) -> Place {
        order::place_of_unit(self.order, self.units_per_split, self.cardinality, unit, watermark)
    }

    /// Whether a consumer may still wait for the announcement of the split at
    /// `unit`: its place is not below the floor of `watermark` (a consumer
    /// moves past every place below the floor without announcements).
    pub(crate) fn may_be_awaited(&self, unit: u64, watermark: u64) -> bool {
        let place = self.place(unit, watermark);
        place.index >= place.floor
    }
}

pub(crate) fn grant(state: &mut State, ask: Ask, shape: Shape) -> Response {
    let Some(p) = state.exactly_once.iterations.get_mut(&ask.iteration_id) else {
        return Response::Split(SplitAnswer::EndOfSplits);
    };
    let (begin, end, skips, cursor) = match take_ready_orphan(p, &shape) {
        Some((b, e, skips)) => (b, e, skips, ask.cursor),
        None => {
            let splits = order::split_count(shape.units_per_split, shape.cardinality);
            let c = ask.cursor;
            if c.repetition > ask.repetition || c.next >= splits {
                if !p.orphans.is_empty() {
                    return record_ordered(state, &ask, SplitAnswer::Wait, vec![], None);
                }
                let closed = if c.repetition > ask.repetition {
                    c
                } else {
                    SplitCursor { repetition: c.repetition.saturating_add(1), next: 0 }
                };
                set_cursor(state, ask.iteration_id, closed);
                return record_ordered(state, &ask, SplitAnswer::EndOfSplits, vec![], None);
            }
            if c.next >= order::window_end(p.consumed.watermark(), shape.units_per_split) {
                return record_ordered(state, &ask, SplitAnswer::Wait, vec![], None);
            }
            let s = order::split_at(shape.order.seed, splits, c.next);
            let (ob, oe) = order::split_range(s, shape.units_per_split, shape.cardinality);
            let (b, e) = match p.unfinished_ranges(ob, oe).first() {
                Some(&(b, _)) => (b, oe),
                None => (ob, ob),
            };
            let skips = p.consumed.runs_in(b, e);
            (b, e, skips, SplitCursor { next: c.next + 1, ..c })
        }
    };
    p.granted.entry(ask.task_id).or_default().insert(begin, end);
    let place = shape.place(begin, p.consumed.watermark());
    set_cursor(state, ask.iteration_id, cursor);
    record_ordered(state, &ask, SplitAnswer::Split { begin, end }, skips, Some(place))
}

/// The first ready orphan's split, whole: from its first unit that is not
/// whole to the split's end, with every consumed record in between skipped. A
/// grant here always runs to its split's end, so a lost task's orphans of one
/// split (the not-whole pieces of that grant) are all taken together. `None`
/// when no orphan is ready; orphans whose units all became whole are dropped.
fn take_ready_orphan(p: &mut Progress, shape: &Shape) -> Option<(u64, u64, Vec<Run>)> {
    while let Some(i) = p.ready_orphan() {
        let place = shape.place(p.orphans[i].begin, 0);
        let (mut first, mut announcement) = (u64::MAX, false);
        p.orphans.retain(|o| {
            let take = o.waiting.is_empty() && (place.begin..place.end).contains(&o.begin);
            if take {
                first = first.min(o.begin);
                announcement |= o.begin == o.end;
            }
            !take
        });
        if let Some(&(b, _)) = p.unfinished_ranges(first, place.end).first() {
            return Some((b, place.end, p.consumed.runs_in(b, place.end)));
        }
        // A lost task's announcement of a split all whole: made again, empty,
        // or its consumer would wait for the place forever.
        if announcement {
            return Some((place.begin, place.begin, vec![]));
        }
    }
    None
}

/// [`grants::replay`] of a deterministic-order iteration: a grant with its place.
pub(crate) fn replay(state: &State, task_id: TaskId, last: SplitRecord, shape: Shape) -> Response {
    let plain = grants::replay(state, task_id, last);
    let SplitAnswer::Split { begin, .. } = last.answer else { return plain };
    let skip_runs = match plain {
        Response::SplitSkipping { skip_runs, .. } => skip_runs,
        _ => vec![],
    };
    let watermark = state
        .tasks
        .get(&task_id)
        .and_then(|t| state.exactly_once.iterations.get(&t.iteration_id))
        .map_or(0, |p| p.consumed.watermark());
    let place = shape.place(begin, watermark);
    Response::OrderedSplit { answer: last.answer, skip_runs, place }
}

/// [`record`] answering a grant with its place (`place` is `Some` exactly for
/// a `Split`).
fn record_ordered(
    state: &mut State,
    ask: &Ask,
    answer: SplitAnswer,
    skips: Vec<Run>,
    place: Option<Place>,
) -> Response {
    match (record(state, ask, answer, skips), place) {
        (Response::SplitSkipping { answer, skip_runs }, Some(place)) => {
            Response::OrderedSplit { answer, skip_runs, place }
        }
        (Response::Split(answer), Some(place)) => {
            Response::OrderedSplit { answer, skip_runs: vec![], place }
        }
        (other, _) => other,
    }
}
