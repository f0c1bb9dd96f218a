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
/// One merge of the two sorted id sets; only the tasks to start are looked up in
/// the registry (and rendered). A worker whose running tasks are its active ones
/// — every heartbeat but those that bring news — costs one pass over its own
/// task ids, nothing per task of the registry.
pub(crate) fn answer(
    s: &State,
    address: &str,
    current: &BTreeSet<u64>,
) -> pb::WorkerHeartbeatResponse {
    let empty = BTreeSet::new();
    let active = s.workers.get(address).map_or(&empty, |w| &w.active_tasks);
    let (to_start, tasks_to_delete) = diff(active, current);
    let new_tasks = to_start
        .into_iter()
        .filter_map(|id| s.tasks.get(&id))
        .filter_map(|t| task_def(s, t))
        .collect();
    pb::WorkerHeartbeatResponse { new_tasks, tasks_to_delete, long_polled: false }
}

/// (in `active` only, in `current` only), both in id order, by one merge.
fn diff(active: &BTreeSet<u64>, current: &BTreeSet<u64>) -> (Vec<u64>, Vec<u64>) {
    let (mut start, mut delete) = (vec![], vec![]);
    let (mut a, mut c) = (active.iter().peekable(), current.iter().peekable());
    loop {
        match (a.peek(), c.peek()) {
            (Some(x), Some(y)) if x == y => {
                a.next();
                c.next();
            }
            (Some(x), Some(y)) if x < y => start.extend(a.next()),
            (Some(_), Some(_)) => delete.extend(c.next()),
            (Some(_), None) => start.extend(a.next()),
            (None, Some(_)) => delete.extend(c.next()),
            (None, None) => return (start, delete),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_what_to_start_and_what_to_delete() {
        let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(diff(&set(&[1, 2, 3]), &set(&[1, 2, 3])), (vec![], vec![]));
        assert_eq!(diff(&set(&[1, 3, 5]), &set(&[2, 3, 4])), (vec![1, 5], vec![2, 4]));
        assert_eq!(diff(&set(&[]), &set(&[7])), (vec![], vec![7]));
        assert_eq!(diff(&set(&[7, 9]), &set(&[])), (vec![7, 9], vec![]));
    }
}
