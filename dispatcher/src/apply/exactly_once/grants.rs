//! `GetSplit` of an exactly-once iteration (provider 0; such an iteration has
//! one source):
//!
//! 1. an orphan no consumer waits for is handed out first (its units that are
//!    not whole, at most one grant's worth);
//! 2. otherwise the cursor's next range, as for any DYNAMIC iteration, but
//!    never below the consumed watermark (`splits.rs` raises the cursor);
//! 3. past the end, while orphans still wait for acknowledgements, `Wait`
//!    instead of end-of-splits (the cursor does not close the epoch).
//!
//! Every grant carries the consumed runs of its units as `skip_runs` (orphans'
//! records consumed before the loss; a restored position's records), cut at a
//! unit boundary to at most `MAX_SKIP_RUNS`. What a task was granted is kept
//! until it is below the watermark (what its loss orphans), and the skips of its
//! last grant are kept so that a replayed request gets the same answer. A
//! `Wait` grants nothing, so a worker may ask again after it with the same
//! sequence or the next (`splits.rs`). A deterministic-order iteration's
//! grants are `ordered.rs`'s, which uses the bookkeeping here.

use sluice_positions::Run;

use crate::command::Response;
use crate::error::StateError;
use crate::exactly_once::{LastSkips, Progress};
use crate::state::{IterationId, SplitAnswer, SplitCursor, SplitRecord, State, TaskId};

/// What one request asks, as `splits.rs` resolved it.
pub(crate) struct Ask {
    pub task_id: TaskId,
    pub iteration_id: IterationId,
    pub worker_uid: u64,
    pub sequence: u64,
    pub repetition: u64,
    pub cursor: SplitCursor,
    /// What the cursor would answer (`splits::next_split`) and its cursor after.
    pub fresh: (SplitAnswer, SplitCursor),
    /// Units per grant.
    pub step: u64,
}

pub(crate) fn is_exactly_once(state: &State, iteration_id: IterationId) -> bool {
    state.exactly_once.iterations.contains_key(&iteration_id)
}

/// Every unit below this is consumed whole.
pub(crate) fn watermark(state: &State, iteration_id: IterationId) -> u64 {
    state.exactly_once.iterations.get(&iteration_id).map_or(0, |p| p.consumed.watermark())
}

/// The answer of a replayed request (same task, uid and sequence).
pub(crate) fn replay(state: &State, task_id: TaskId, last: SplitRecord) -> Response {
    let skips = state
        .tasks
        .get(&task_id)
        .and_then(|t| state.exactly_once.iterations.get(&t.iteration_id))
        .and_then(|p| p.last_skips.get(&task_id))
        .filter(|s| s.worker_uid == last.worker_uid && s.sequence == last.sequence);
    match skips {
        Some(s) => Response::SplitSkipping { answer: last.answer, skip_runs: s.runs.clone() },
        None => Response::Split(last.answer),
    }
}

/// An exactly-once iteration reads its source once: a `repeat` stage is refused
/// at job creation, so its workers ask for repetition 0 only. A later epoch
/// would hand every unit out again.
pub(crate) fn check_repetition(ask: &Ask) -> Result<(), StateError> {
    if ask.repetition > 0 {
        return Err(StateError::InvalidArgument(format!(
            "task {}: split request for repetition {} of an exactly-once iteration, which \
             reads its source once (repetition 0); epochs are the reader's repetition",
            ask.task_id, ask.repetition
        )));
    }
    Ok(())
}

pub(crate) fn grant(state: &mut State, ask: Ask) -> Response {
    let Some(p) = state.exactly_once.iterations.get_mut(&ask.iteration_id) else {
        return Response::Split(SplitAnswer::EndOfSplits);
    };
    let (begin, end, skips, cursor) = match take_ready_orphan(p, ask.step) {
        Some((begin, end, skips)) => (begin, end, skips, ask.cursor),
        None => {
            let (answer, next) = ask.fresh;
            match answer {
                SplitAnswer::Split { begin, end } => {
                    let (end, skips) = p.skips_within(begin, end);
                    (begin, end, skips, SplitCursor { next: end, ..next })
                }
                // Past the end: the epoch is not over while lost units wait.
                _ if !p.orphans.is_empty() => {
                    return record(state, &ask, SplitAnswer::Wait, vec![])
                }
                other => {
                    set_cursor(state, ask.iteration_id, next);
                    return record(state, &ask, other, vec![]);
                }
            }
        }
    };
    p.granted.entry(ask.task_id).or_default().insert(begin, end);
    set_cursor(state, ask.iteration_id, cursor);
    record(state, &ask, SplitAnswer::Split { begin, end }, skips)
}

/// The first ready orphan's first units that are not whole, at most `step` of
/// them (what is left of it stays, still ready); orphans whose units all became
/// whole meanwhile are dropped.
fn take_ready_orphan(p: &mut Progress, step: u64) -> Option<(u64, u64, Vec<Run>)> {
    while let Some(i) = p.ready_orphan() {
        let (begin, end) = (p.orphans[i].begin, p.orphans[i].end);
        let Some(&(b, e)) = p.unfinished_ranges(begin, end).first() else {
            p.orphans.remove(i);
            continue;
        };
        let (e, skips) = p.skips_within(b, e.min(b.saturating_add(step.max(1))));
        if e >= end {
            p.orphans.remove(i);
        } else {
            p.orphans[i].begin = e;
        }
        return Some((b, e, skips));
    }
    None
}

pub(crate) fn set_cursor(state: &mut State, iteration_id: IterationId, cursor: SplitCursor) {
    if let Some(c) = state.iterations.get_mut(&iteration_id).and_then(|it| it.cursors.first_mut()) {
        *c = cursor;
    }
}

/// Keeps the answer for a replay and answers it.
pub(crate) fn record(
    state: &mut State,
    ask: &Ask,
    answer: SplitAnswer,
    skips: Vec<Run>,
) -> Response {
    let (worker_uid, sequence) = (ask.worker_uid, ask.sequence);
    if let Some(task) = state.tasks.get_mut(&ask.task_id) {
        task.last_split = Some(SplitRecord { worker_uid, sequence, answer });
    }
    let Some(p) = state.exactly_once.iterations.get_mut(&ask.iteration_id) else {
        return Response::Split(answer);
    };
    if skips.is_empty() {
        p.last_skips.remove(&ask.task_id);
        return Response::Split(answer);
    }
    let last = LastSkips { worker_uid, sequence, runs: skips.clone() };
    p.last_skips.insert(ask.task_id, last);
    Response::SplitSkipping { answer, skip_runs: skips }
}
