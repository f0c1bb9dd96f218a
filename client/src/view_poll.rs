//! The reader's long poll of its iteration (`ClientHeartbeat`): one call always
//! outstanding, answered by the dispatcher the moment the view changes.
//!
//! ```text
//!  call(known_view = 0) ──► answer at once (task list, digest d1)
//!  call(known_view = d1, wait_for_change_ms) ──► leader waits ──► a task or the
//!        iteration finished: answer (d2) ──► call(known_view = d2, …) at once
//!                                    └─► the wait passed: unchanged (d1) ──► call again
//! ```
//!
//! An unchanged view comes without its task list (`omit_unchanged_tasks`: a list
//! holds one entry per worker, and most answers are unchanged); the poll fills in
//! the list it kept, so callers always see a whole view.
//!
//! A call that brought no change is followed by the next one no sooner than
//! `min(heartbeat_interval, wait)` after it began, so a dispatcher that answers at
//! once (one that does not long-poll: `view_digest` 0) is polled every
//! `heartbeat_interval`, as before. Every call is a heartbeat too: the dispatcher's
//! client timeout keeps being fed. The wait stays under half the dispatcher
//! policy's attempt timeout, so a waiting call is never cut off as unanswered.

use std::time::Duration;

use sluice_proto::v1 as pb;
use tokio::time::Instant;

use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::options::ReadOptions;

pub(crate) struct ViewPoll {
    dispatcher: DispatcherClient,
    client_id: u64,
    /// Digest of the last view received (0: none yet).
    known_view: u64,
    /// How long the dispatcher may hold a call for a change (zero: plain polling).
    wait: Duration,
    /// Least time between the starts of two calls when the first brought no change.
    pace: Duration,
    last_start: Option<Instant>,
    /// The last answer differed from the one before: call again at once.
    changed: bool,
    /// The task list of the last view received: an unchanged view comes without
    /// one (`tasks_omitted`) and gets this one back.
    tasks: Vec<pb::TaskInfo>,
}

impl ViewPoll {
    pub(crate) fn new(dispatcher: DispatcherClient, client_id: u64, opts: &ReadOptions) -> Self {
        let wait = opts.long_poll.min(dispatcher.policy().attempt_timeout / 2);
        let pace = if wait.is_zero() {
            opts.heartbeat_interval
        } else {
            opts.heartbeat_interval.min(wait)
        };
        ViewPoll {
            dispatcher,
            client_id,
            known_view: 0,
            wait,
            pace,
            last_start: None,
            changed: true,
            tasks: vec![],
        }
    }

    /// The next view. Takes and gives back `self`, so the caller can keep the call
    /// in flight across `select!` rounds (dropping it would cancel the call).
    pub(crate) async fn next(mut self) -> (Self, Result<pb::ClientHeartbeatResponse, ClientError>) {
        if let (false, Some(start)) = (self.changed, self.last_start) {
            tokio::time::sleep_until(start + self.pace).await;
        }
        self.last_start = Some(Instant::now());
        let req = pb::ClientHeartbeatRequest {
            client_id: self.client_id,
            wait_for_change_ms: u32::try_from(self.wait.as_millis()).unwrap_or(u32::MAX),
            known_view: self.known_view,
            omit_unchanged_tasks: true,
            ..Default::default()
        };
        let mut result = self.dispatcher.client_heartbeat_with(req).await;
        if let Ok(resp) = &mut result {
            // Unchanged: the dispatcher left out the list we already have.
            if resp.tasks_omitted && resp.view_digest == self.known_view {
                resp.tasks = self.tasks.clone();
            } else {
                self.tasks = resp.tasks.clone();
            }
            // A dispatcher that does not long-poll sends 0: treat as unchanged, so
            // it is paced by heartbeat_interval.
            self.changed = resp.view_digest != 0 && resp.view_digest != self.known_view;
            self.known_view = resp.view_digest;
        }
        (self, result)
    }
}
