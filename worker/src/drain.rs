//! Leaving cleanly: draining on shutdown, and exiting when idle.
//!
//! ```text
//!  SIGTERM / shutdown future ──▶ drain: `draining` = true
//!     │  no new tasks (start_tasks), no new streams but on DYNAMIC tasks
//!     │  (Unavailable), DYNAMIC sources take no new split: their pipelines end
//!     │  with the splits they hold, their streams (open then, or opened later by a
//!     │  reader that was paused) deliver them with end_of_sequence, the tasks
//!     │  finish and the heartbeat reports them (nothing is lost, nothing doubled)
//!     ▼
//!  every stream ended, every DYNAMIC task finished and every finished task
//!  reported, or `drain_timeout`
//!     ▼
//!  shut_down: remaining streams end with Unavailable ("the worker is shutting
//!  down", which readers retry), the control loop stops, the server closes.
//! ```
//!
//! OFF and static tasks cannot end early (their data is the whole dataset or
//! shard), so their streams run until the timeout and are then cut; a worker
//! restarted at the same address gets those tasks back (guarantee O2).
//!
//! Both waits below poll the task table every [`CHECK_EVERY`]: they are on the way
//! out of the process, where a few milliseconds do not matter, and polling keeps
//! the shared task code free of extra wake-ups.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::Worker;
use crate::task::Task;

const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Counts a GetElements stream on its task while alive.
pub(crate) struct OpenStream(Arc<Task>);

impl OpenStream {
    pub(crate) fn new(task: &Arc<Task>) -> Self {
        task.open_streams.fetch_add(1, Ordering::Relaxed);
        OpenStream(task.clone())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Drains the worker: returns once every stream in progress has ended and every
/// finished task was reported, or after `drain_timeout`. A zero timeout returns at
/// once (crash-only stop, as `WorkerHandle` in tests).
pub(crate) async fn drain(worker: &Worker) {
    let timeout = worker.config.drain_timeout;
    if timeout.is_zero() {
        return;
    }
    worker.draining.send_replace(true);
    tracing::info!(?timeout, "draining: no new tasks or streams; streams in progress may finish");
    let deadline = Instant::now() + timeout;
    loop {
        let (running, _, unreported) = worker.activity();
        let streaming =
            running.iter().filter(|t| t.open_streams.load(Ordering::Relaxed) > 0).count();
        // A DYNAMIC task still running holds splits no other worker has: it ends once
        // a reader has taken them (with or without a stream open right now).
        let holding = running.iter().filter(|t| t.dynamic).count();
        if streaming == 0 && holding == 0 && unreported == 0 {
            tracing::info!("drained: no stream in progress, every finished task reported");
            return;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                streaming,
                holding,
                unreported,
                ?timeout,
                "drain timeout: cutting the streams still in progress"
            );
            return;
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// Resolves once the worker has been idle for `grace` — at least one task ran, none
/// is unfinished, and the dispatcher heard of every finished one; never when
/// `exit_when_idle` is unset.
pub(crate) async fn idle(worker: Arc<Worker>) {
    let Some(grace) = worker.config.exit_when_idle else {
        return std::future::pending().await;
    };
    let mut idle_since: Option<Instant> = None;
    loop {
        let (running, started, unreported) = worker.activity();
        if started > 0 && running.is_empty() && unreported == 0 {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= grace {
                tracing::info!(?grace, tasks_run = started, "idle: every task finished; exiting");
                return;
            }
        } else {
            idle_since = None;
        }
        tokio::time::sleep(CHECK_EVERY.min(grace)).await;
    }
}
