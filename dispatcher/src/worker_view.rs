//! A worker's heartbeat answer, and the long poll that holds an empty one.
//!
//! A worker learns its tasks only from heartbeat answers. Polled every heartbeat
//! interval (500 ms), a task created just after a heartbeat waited up to that long
//! before its worker started it: the first element of a job came ~0.6 s after it
//! was made, and a DYNAMIC epoch could not end until every worker had picked up
//! (and found nothing left in) its task, 0–500 ms after the last element. So a
//! worker that asks for it (`wait_for_change_ms`) gets its answer held while it
//! would be empty, and sent as soon as an applied change gives it a task to start
//! or to delete. The wait is `long_poll.rs`'s, shared with the client's long poll
//! (`client_view.rs`).
//!
//! ```text
//!  heartbeat ─► read_leader(answer) ─► tasks to start or delete? ─► answer
//!                       ▲                        │ no
//!                       └── applied index changed, or the wait is over ─┘
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use sluice_proto::v1 as pb;

use crate::convert::task_def;
use crate::core::Core;
use crate::error::ProposeError;
use crate::long_poll::wait_for_change;
use crate::state::State;

/// The tasks `address` should start (assigned to it, not among `current`) and
/// stop (among `current`, no longer active for it).
///
/// Two merges of the sorted id sets (`BTreeSet::difference`); only the tasks to
/// start are looked up in the registry (and rendered). A worker whose running
/// tasks are its active ones — every heartbeat but those that bring news — costs
/// passes over its own task ids, nothing per task of the registry.
pub(crate) fn answer(
    s: &State,
    address: &str,
    current: &BTreeSet<u64>,
) -> pb::WorkerHeartbeatResponse {
    let empty = BTreeSet::new();
    let active = s.workers.get(address).map_or(&empty, |w| &w.active_tasks);
    let new_tasks = active
        .difference(current)
        .filter_map(|id| s.tasks.get(id))
        .filter_map(|t| task_def(s, t))
        .collect();
    let tasks_to_delete = current.difference(active).copied().collect();
    pb::WorkerHeartbeatResponse { new_tasks, tasks_to_delete, long_polled: false }
}

/// The answer at once if it has something to do or `wait` is zero; otherwise the
/// first non-empty answer after an applied change, or the empty one when `wait`
/// has passed. `on_read` runs after each read (the handler feeds the worker's
/// liveness timer with it, so a held heartbeat keeps the worker alive).
pub(crate) async fn long_poll(
    core: &Core,
    address: &str,
    current: &BTreeSet<u64>,
    wait: Duration,
    on_read: impl Fn(),
) -> Result<pb::WorkerHeartbeatResponse, ProposeError> {
    let ready = |a: &pb::WorkerHeartbeatResponse| {
        on_read();
        !a.new_tasks.is_empty() || !a.tasks_to_delete.is_empty()
    };
    let mut resp = wait_for_change(core, wait, |s, _| answer(s, address, current), ready).await?;
    // Set unless the worker asked for no wait: an empty answer that was held
    // needs no pacing by the worker (`worker/src/heartbeat.rs`).
    resp.long_polled = !wait.is_zero();
    Ok(resp)
}
