//! What a consumer sees of its iteration (`ClientHeartbeat`), and the long poll
//! that tells it the moment that changes.
//!
//! ```text
//!  ClientHeartbeat(known_view, wait_for_change_ms)
//!     │ subscribe to the applied index ─► read_leader(view) ─► differs from known_view? ─► answer
//!     │                                                          │ no
//!     │   ┌──────────────────────────────────────────────────────┘
//!     │   ▼
//!     └─ wait: applied index changed ─► read_local(view) ─► differs? ─► answer
//!             or the deadline passed ─────────────────────────────────► answer (unchanged)
//! ```
//!
//! The first read confirms leadership with a quorum, so a follower refuses at once
//! with the leader's address, as for any call. Later reads are local: each sees a
//! committed state at least as new as the confirmed one, so an answer is never
//! older than the state when the request arrived; a leader deposed meanwhile
//! answers at the deadline at the latest, and the next call finds the new one.
//! Nothing here is replicated: the digest is computed from the state on demand.

use std::time::Duration;

use sluice_proto::v1 as pb;
use tokio::time::Instant;

use crate::core::Core;
use crate::error::ProposeError;
use crate::state::{ClientId, State};

/// The client's view of its iteration, with its digest; `None` if the client is
/// not known (released, or forgotten by an in-memory restart).
pub(crate) fn view(s: &State, client_id: ClientId) -> Option<pb::ClientHeartbeatResponse> {
    let it = s.client_iteration(client_id)?;
    let tasks = crate::convert::task_infos(s, it);
    let mut resp = pb::ClientHeartbeatResponse {
        iteration_id: it.id,
        tasks,
        iteration_finished: it.finished,
        ..Default::default()
    };
    resp.view_digest = digest(&resp);
    Some(resp)
}

/// FNV-1a over what the reader acts on: stable across processes and versions, so
/// a digest from one dispatcher means the same to the next leader. Never 0 (0 is
/// "no view yet"). A collision only delays an answer to the wait's deadline.
pub(crate) fn digest(resp: &pb::ClientHeartbeatResponse) -> u64 {
    use std::hash::Hasher;
    let mut h = fnv::FnvHasher::default();
    h.write(&resp.iteration_id.to_le_bytes());
    h.write(&(resp.tasks.len() as u64).to_le_bytes());
    for t in &resp.tasks {
        h.write(&t.task_id.to_le_bytes());
        h.write(&(t.worker_address.len() as u64).to_le_bytes());
        h.write(t.worker_address.as_bytes());
        h.write(&[t.finished as u8]);
    }
    h.write(&[resp.iteration_finished as u8]);
    h.finish().max(1)
}

/// Answers with the client's view once it differs from `known_view` (at once if
/// it already does, or if `known_view` is 0), or when `wait` has passed (the
/// handler caps it with `DispatcherConfig::max_client_wait`). `on_read` runs after each read that found the
/// client (the handler feeds the liveness timer with it).
pub(crate) async fn long_poll(
    core: &Core,
    client_id: ClientId,
    known_view: u64,
    wait: Duration,
    on_read: impl Fn(),
) -> Result<Option<pb::ClientHeartbeatResponse>, ProposeError> {
    let deadline = Instant::now() + wait;
    // Subscribed before the first read, so a change applied between that read and
    // the wait still wakes it.
    let mut applied = core.applied();
    let mut current = core.read_leader(|s| view(s, client_id)).await?;
    loop {
        let Some(resp) = &current else { return Ok(None) };
        on_read();
        if known_view == 0 || resp.view_digest != known_view || Instant::now() >= deadline {
            return Ok(current);
        }
        tokio::select! {
            changed = applied.changed() => {
                if changed.is_err() {
                    return Ok(current); // the state machine is gone: answer what we have
                }
            }
            _ = tokio::time::sleep_until(deadline) => return Ok(current),
        }
        current = core.read_local(|s| view(s, client_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(finished: bool, iteration_finished: bool) -> pb::ClientHeartbeatResponse {
        pb::ClientHeartbeatResponse {
            iteration_id: 7,
            tasks: vec![pb::TaskInfo {
                task_id: 3,
                worker_address: "127.0.0.1:1".into(),
                finished,
                ..Default::default()
            }],
            iteration_finished,
            ..Default::default()
        }
    }

    #[test]
    fn the_digest_changes_with_every_field_the_reader_acts_on() {
        let base = digest(&resp(false, false));
        assert_eq!(base, digest(&resp(false, false)), "deterministic");
        assert_ne!(base, 0);
        assert_ne!(base, digest(&resp(true, false)), "a task finished");
        assert_ne!(digest(&resp(true, false)), digest(&resp(true, true)), "iteration finished");
        let mut moved = resp(false, false);
        moved.tasks[0].worker_address = "127.0.0.1:2".into();
        assert_ne!(base, digest(&moved), "a task on another worker");
        let mut more = resp(false, false);
        more.tasks.push(pb::TaskInfo { task_id: 4, ..Default::default() });
        assert_ne!(base, digest(&more), "a new task");
    }

    #[test]
    fn the_digest_ignores_what_the_reader_does_not_act_on() {
        let mut r = resp(false, false);
        let base = digest(&r);
        r.coordinated_pause = true;
        r.view_digest = 42;
        assert_eq!(base, digest(&r));
    }
}
