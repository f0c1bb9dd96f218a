//! The wait both heartbeat long polls share (`client_view.rs` for `ClientHeartbeat`,
//! `worker_view.rs` for `WorkerHeartbeat`): read an answer from the state, and
//! while it is not worth sending, read it again each time the state machine
//! applies something, until the wait is over.
//!
//! ```text
//!  subscribe to the views generation ─► read_leader(read) ─► ready? ─► answer
//!                                                           │ no
//!      ┌────────────────────────────────────────────────────┘
//!      ▼
//!  wait: views generation moved ─► read_local(read) ─► ready? ─► answer
//!        or the deadline passed ───────────────────────────────► answer (last read)
//! ```
//!
//! The first read confirms leadership with a quorum, so a follower refuses at once
//! with the leader's address, as for any call. Later reads are local: each sees a
//! committed state at least as new as the confirmed one, so an answer is never
//! older than the state when the request arrived; a leader deposed meanwhile
//! answers at the deadline at the latest, and the next call finds the new one.
//! The wake-up is the views generation on a `watch` channel (`Core::views`),
//! published after each applied batch that may change a heartbeat's answer
//! (`Command::may_change_views`): no polling, and a batch of grants alone wakes no
//! held heartbeat. (Waking every held poll at every commit re-read N workers'
//! and M consumers' views per commit: the cost grew with N × M × commits/s.)
//! `read` gets the generation of the state it reads, to cache by it. Nothing
//! here is replicated.

use std::time::Duration;

use tokio::time::Instant;

use crate::core::Core;
use crate::error::ProposeError;
use crate::state::State;

/// Reads `read` on the leader, then again after every views change, and answers
/// the first read `ready` accepts, or the last one when `wait` has passed (at once
/// if `wait` is zero). `ready` runs once after each read, so a caller can also note
/// each read (the handlers feed the liveness timers there).
pub(crate) async fn wait_for_change<T>(
    core: &Core,
    wait: Duration,
    read: impl Fn(&State, u64) -> T,
    mut ready: impl FnMut(&T) -> bool,
) -> Result<T, ProposeError> {
    let deadline = Instant::now() + wait;
    // Subscribed before the first read, so a change applied between that read and
    // the wait still wakes it.
    let mut views = core.views();
    let mut current = core.read_leader_at(&read).await?;
    loop {
        if ready(&current) || Instant::now() >= deadline {
            return Ok(current);
        }
        tokio::select! {
            changed = views.changed() => {
                if changed.is_err() {
                    return Ok(current); // the state machine is gone: answer what we have
                }
            }
            _ = tokio::time::sleep_until(deadline) => return Ok(current),
        }
        current = core.read_local_at(&read);
    }
}
