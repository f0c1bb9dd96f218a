//! What a consumer sees of its iteration (`ClientHeartbeat`), and the long poll
//! that tells it the moment that changes.
//!
//! The wait itself (leader read first, then a local re-read at each applied
//! change, until the deadline) is `long_poll.rs`'s, shared with the worker's
//! heartbeat. Nothing here is replicated: the digest is computed from the state on
//! demand.

use std::time::Duration;

use sluice_proto::v1 as pb;

use crate::core::Core;
use crate::error::ProposeError;
use crate::long_poll::wait_for_change;
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
    // Exactly-once: the checkpoint watermark for this consumer's generation.
    // Not in the digest: a new watermark alone does not end a long poll.
    if let Some(p) = s.exactly_once.iterations.get(&it.id) {
        let generation = p.client_generations.get(&client_id).copied().unwrap_or(0);
        let (watermark, generation) = p.checkpoint(generation);
        resp.checkpoint_watermark = watermark;
        resp.checkpoint_generation = generation;
        resp.delivery = sluice_proto::v1::Delivery::ExactlyOnce as i32;
    }
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
/// handler caps it with `DispatcherConfig::max_client_wait`); `None` at once if
/// the client is not known. `on_read` runs after each read that found the client
/// (the handler feeds the liveness timer with it).
pub(crate) async fn long_poll(
    core: &Core,
    client_id: ClientId,
    known_view: u64,
    wait: Duration,
    on_read: impl Fn(),
) -> Result<Option<pb::ClientHeartbeatResponse>, ProposeError> {
    let ready = |current: &Option<pb::ClientHeartbeatResponse>| match current {
        None => true,
        Some(resp) => {
            on_read();
            known_view == 0 || resp.view_digest != known_view
        }
    };
    wait_for_change(core, wait, |s| view(s, client_id), ready).await
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
