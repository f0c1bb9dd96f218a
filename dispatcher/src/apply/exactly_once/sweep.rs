//! `SweepIteration`: the end-of-epoch sweep (docs/exactly-once.md, "Records
//! delivered and never consumed").
//!
//! A worker's task can end normally while records it produced were consumed by
//! nobody: they sat in a reader that left (released without a restore), or in
//! a GetElements message lost with a broken stream, or rode on an end of
//! sequence no reader received. Their units never become whole, so the
//! iteration would never finish. Orphans (`orphans.rs`) do not cover them: no
//! task was lost.
//!
//! The leader learns from consumers' heartbeats (`ConsumedReport.drained_tasks`)
//! that each holds nothing of the iteration's first `tasks` tasks and reported
//! all it consumed; when that is true of every current consumer and every task
//! ended, no element of those units is held anywhere, so the units granted and
//! not whole are handed out again (skipping their consumed records) to a fresh
//! task. The leader's knowledge is soft (rebuilt from heartbeats after a
//! failover); this command re-checks everything it rests on against the
//! replicated state, so a late or stale proposal changes nothing.

use crate::command::Response;
use crate::exactly_once::Orphan;
use crate::state::{ClientId, IterationId, State};

use super::orphans;

/// Applies `SweepIteration` (see the module docs).
pub(crate) fn sweep(
    state: &mut State,
    iteration_id: IterationId,
    tasks: u64,
    drained: &[ClientId],
) -> Response {
    if !state.sweep_due(iteration_id, tasks, drained) {
        return Response::Swept { orphans: 0 };
    }
    let task_ids =
        state.iterations.get(&iteration_id).map(|it| it.tasks.clone()).unwrap_or_default();
    let Some(p) = state.exactly_once.iterations.get_mut(&iteration_id) else {
        return Response::Swept { orphans: 0 };
    };
    let mut orphaned = 0;
    for task_id in task_ids {
        p.last_skips.remove(&task_id);
        let Some(ranges) = p.granted.remove(&task_id) else { continue };
        for (begin, end) in ranges {
            for (begin, end) in p.unfinished_ranges(begin, end) {
                // Nobody holds any of it: no acknowledgement to wait for.
                p.orphans.push(Orphan { task_id, begin, end, waiting: Default::default() });
                orphaned += 1;
            }
        }
    }
    orphans::ensure_reader(state, iteration_id, u64::MAX);
    Response::Swept { orphans: orphaned }
}
