//! The control loop: register with the dispatcher, then heartbeat.
//!
//! ```text
//!  register ──ok──▶ heartbeat: a long poll the dispatcher holds up to one interval
//!     ▲                 │ while it has no task to start or stop for this worker
//!     │                 │ (at once when a task finished: the poll is dropped and
//!     │                 │ a new heartbeat reports it)
//!     │                 │ new_tasks → start, tasks_to_delete → stop,
//!     └── NotFound ─────┘ finished_tasks reported until a heartbeat carrying them succeeds
//! ```
//!
//! Held polls let a worker start a new task within milliseconds instead of at its
//! next heartbeat (`dispatcher/src/worker_view.rs`). An empty answer the
//! dispatcher did not hold (`long_polled` unset: it does not hold polls) is
//! followed by the rest of the interval, so the loop never spins.
//!
//! A heartbeat leaves out the list of running tasks when they have the digest the
//! last answer named (`active_tasks_digest`): the dispatcher knows them, and most
//! heartbeats change nothing. If they changed there meanwhile, the answer asks for
//! the list (`current_tasks_wanted`) and the next heartbeat, at once, carries it.
//!
//! Every dispatcher call is bounded by the `RetryPolicy` inside `DispatcherClient`;
//! this loop only decides what to do after one gave up: registration is tried again
//! (the client's retry loop, without a deadline) until it succeeds or the worker
//! stops (a FailedPrecondition refusal — the address is not in the dispatcher's
//! worker list — or an InvalidArgument one — the address is not `HOST:PORT` —
//! stops the worker), a failed heartbeat is logged and the next one
//! carries the same reports. NotFound means the dispatcher lost this worker (an
//! in-memory dispatcher restarted, or it timed us out), so the worker registers again.

use std::sync::Arc;

use std::time::Duration;

use sluice_client::retry::Attempt;
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
/// tasks the dispatcher hands back. Each `RegisterWorker` call is already retried
/// per the dispatcher policy; this loop tries again after one gave up, with the
/// same backoff and no deadline: a worker waits for its dispatcher indefinitely.
async fn register(worker: &Arc<Worker>, shutdown: &mut watch::Receiver<bool>) -> bool {
    let policy = worker.dispatcher.policy().clone().with_deadline(Duration::MAX);
    let addresses = worker.dispatcher.addresses().join(",");
    let each_attempt = shutdown.clone();
    let attempts = policy.retry("dispatcher", &addresses).run_until(
        async {
            stopped(shutdown).await;
            false
        },
        |_| {
            let call = worker.dispatcher.register_worker(worker.register_request());
            let mut shutdown = each_attempt.clone();
            async move {
                let result = tokio::select! {
                    r = call => r,
                    _ = stopped(&mut shutdown) => return Attempt::Done(false),
                };
                match result {
                    Ok(resp) => {
                        tracing::info!(tasks = resp.tasks.len(), "registered with the dispatcher");
                        worker.start_tasks(resp.tasks);
                        worker.registered.send_replace(true);
                        Attempt::Done(true)
                    }
                    // A refusal that no retry changes (the address is not in the
                    // dispatcher's worker list, or not an address readers can
                    // dial): stop the worker, which then exits
                    // with the reason.
                    // Also a token the dispatcher does not accept.
                    Err(e)
                        if matches!(
                            e.code(),
                            Some(
                                Code::FailedPrecondition
                                    | Code::InvalidArgument
                                    | Code::Unauthenticated
                                    | Code::PermissionDenied
                            )
                        ) =>
                    {
                        let reason = match &e {
                            sluice_client::ClientError::Rpc { message, .. } => message.clone(),
                            e => e.to_string(),
                        };
                        tracing::error!(%reason, "the dispatcher refused this worker; stopping");
                        worker.refuse(reason);
                        Attempt::Done(false)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "registration failed; trying again");
                        Attempt::Failed(e)
                    }
                }
            }
        },
    );
    // Without a deadline the loop ends only by success, refusal or shutdown.
    attempts.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "registration gave up");
        false
    })
}

/// Heartbeats until the worker stops (false) or the dispatcher no longer knows this
/// worker (true: the caller registers again).
async fn heartbeat_until_lost(worker: &Arc<Worker>, shutdown: &mut watch::Receiver<bool>) -> bool {
    let interval = worker.config.heartbeat_interval;
    // Whether to wait (out the rest of the interval) before the next heartbeat:
    // not at first, so a task created since registration starts at once.
    let mut pause: Option<std::time::Duration> = None;
    // The last answer's digest of our active tasks: while our running tasks have
    // it, the dispatcher knows them and the heartbeat leaves their list out.
    let mut active_digest: Option<u64> = None;
    loop {
        if let Some(pause) = pause.take() {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = worker.task_finished.notified() => {}
                _ = stopped(shutdown) => return false,
            }
        }
        let mut req = worker.heartbeat_request(active_digest);
        // Nothing to report: the dispatcher may hold the answer until it has a task
        // for us. With finished tasks to report, answer at once.
        let poll = req.finished_tasks.is_empty();
        if poll {
            req.wait_for_change_ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        }
        let finished = req.finished_tasks.clone();
        let started = tokio::time::Instant::now();
        let result = tokio::select! {
            r = worker.dispatcher.worker_heartbeat(req) => r,
            // A task finished while the poll was held: drop the poll, report it now.
            _ = worker.task_finished.notified() => continue,
            _ = stopped(shutdown) => return false,
        };
        match result {
            Ok(resp) if resp.current_tasks_wanted => {
                // Our tasks changed on the dispatcher since it named the digest:
                // send the list, at once (no pause).
                worker.reported(&finished);
                active_digest = None;
            }
            Ok(resp) => {
                let empty = resp.new_tasks.is_empty() && resp.tasks_to_delete.is_empty();
                active_digest = Some(resp.active_tasks_digest).filter(|d| *d != 0);
                worker.reported(&finished);
                worker.delete_tasks(&resp.tasks_to_delete);
                worker.start_tasks(resp.new_tasks);
                // A report (answered at once), or a poll the dispatcher held: poll
                // again at once. A poll answered early and empty by a dispatcher
                // that does not hold polls: wait out the interval.
                if poll && empty && !resp.long_polled {
                    pause = interval.checked_sub(started.elapsed()).filter(|p| !p.is_zero());
                }
            }
            Err(e) if e.code() == Some(Code::NotFound) => {
                tracing::warn!(error = %e, "the dispatcher does not know this worker; registering again");
                worker.forget_all_tasks();
                return true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed");
                pause = Some(interval);
            }
        }
    }
}

/// Resolves once the worker is shutting down.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // Err means the sender is gone, which also means the worker is gone.
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}
