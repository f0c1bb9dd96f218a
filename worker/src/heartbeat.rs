//! The control loop: register with the dispatcher, then heartbeat.
//!
//! ```text
//!  register ──ok──▶ heartbeat every interval (or at once when a task finished)
//!     ▲                 │ new_tasks → start, tasks_to_delete → stop,
//!     └── NotFound ─────┘ finished_tasks reported until a heartbeat carrying them succeeds
//! ```
//!
//! Every dispatcher call is bounded by the `RetryPolicy` inside `DispatcherClient`;
//! this loop only decides what to do after one gave up: registration is tried again
//! until it succeeds or the worker stops (a FailedPrecondition refusal — the address
//! is not in the dispatcher's worker list — stops the worker), a failed heartbeat is logged and the next
//! one carries the same reports. NotFound means the dispatcher lost this worker (an
//! in-memory dispatcher restarted, or it timed us out), so the worker registers again.

use std::sync::Arc;

use tokio::sync::watch;
use tonic::Code;

use crate::state::Worker;

pub(crate) async fn run(worker: Arc<Worker>) {
    let mut shutdown = worker.shutdown_signal();
    while register(&worker, &mut shutdown).await {
        if !heartbeat_until_lost(&worker, &mut shutdown).await {
            break;
        }
    }
    tracing::debug!("control loop stopped");
}

/// Registers, retrying until success (true) or shutdown (false), and starts the
/// tasks the dispatcher hands back.
async fn register(worker: &Arc<Worker>, shutdown: &mut watch::Receiver<bool>) -> bool {
    let mut attempt = 0u32;
    loop {
        let call = worker.dispatcher.register_worker(worker.register_request());
        let result = tokio::select! {
            r = call => r,
            _ = stopped(shutdown) => return false,
        };
        match result {
            Ok(resp) => {
                tracing::info!(tasks = resp.tasks.len(), "registered with the dispatcher");
                worker.start_tasks(resp.tasks);
                return true;
            }
            // A refusal that no retry changes (the address is not in the dispatcher's
            // worker list): stop the worker, which then exits with the reason.
            Err(e) if e.code() == Some(Code::FailedPrecondition) => {
                let reason = match &e {
                    sluice_client::ClientError::Rpc { message, .. } => message.clone(),
                    e => e.to_string(),
                };
                tracing::error!(%reason, "the dispatcher refused this worker; stopping");
                worker.refuse(reason);
                return false;
            }
            Err(e) => {
                tracing::warn!(error = %e, "registration failed; trying again");
                let pause = worker.dispatcher.policy().backoff(attempt);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stopped(shutdown) => return false,
                }
            }
        }
    }
}

/// Heartbeats until the worker stops (false) or the dispatcher no longer knows this
/// worker (true: the caller registers again).
async fn heartbeat_until_lost(worker: &Arc<Worker>, shutdown: &mut watch::Receiver<bool>) -> bool {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(worker.config.heartbeat_interval) => {}
            _ = worker.task_finished.notified() => {}
            _ = stopped(shutdown) => return false,
        }
        let req = worker.heartbeat_request();
        let finished = req.finished_tasks.clone();
        let result = tokio::select! {
            r = worker.dispatcher.worker_heartbeat(req) => r,
            _ = stopped(shutdown) => return false,
        };
        match result {
            Ok(resp) => {
                worker.reported(&finished);
                worker.delete_tasks(&resp.tasks_to_delete);
                worker.start_tasks(resp.new_tasks);
            }
            Err(e) if e.code() == Some(Code::NotFound) => {
                tracing::warn!(error = %e, "the dispatcher does not know this worker; registering again");
                worker.forget_all_tasks();
                return true;
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
    }
}

/// Resolves once the worker is shutting down.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // Err means the sender is gone, which also means the worker is gone.
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}
