//! Coordinated (round-robin) reads on the client: `num_consumers` consumers of a
//! named job read it in *rounds*; in each round every consumer gets its element of
//! each task from the same worker (e.g. so every trainer replica gets a batch of
//! the same bucket at each step).
//!
//! ```text
//!  heartbeat loop ──ClientHeartbeat(consumer_index, paused_at)──▶ dispatcher
//!        │ task list (with starting_round, removed), pause
//!        ▼
//!     Shared ◀── round loop: round r = one CoordinatedGetElement per task, in the
//!                dispatcher's task order, all at once; output in (round, task) order
//! ```
//!
//! A task is read from its `starting_round` on. When the dispatcher says
//! `coordinated_pause` (a worker is joining), the round loop starts no new round
//! and the next heartbeat reports `paused_at` = the first round not started; the
//! dispatcher then sets the joining tasks' `starting_round` to the highest round
//! reported, and lifts the pause (protocol: `dispatcher/src/coordinated_reads.rs`).
//! A task whose worker cannot be reached is retried with backoff; from the second
//! failure on the consumer also votes `MaybeRemoveTask`, and skips the task once
//! all consumers agreed. Everything is bounded: each worker request waits at most
//! about a second (the worker answers `waiting` and we ask again), an unreachable
//! worker fails the read after `worker_retry.deadline`, a vote waits a few seconds.
//! At most one round (one element per task) is buffered beyond the
//! `max_outstanding_requests` messages of the output channel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_dataset::Element;
use sluice_proto::v1 as pb;
use sluice_proto::v1::worker_client::WorkerClient;
use sluice_proto::MAX_MESSAGE_BYTES;
use tokio::sync::{mpsc, watch};
use tonic::service::interceptor::InterceptedService;
use tracing::debug;

use crate::channels::{worker_channel, Authed};
use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::options::ReadOptions;
use crate::reader::{Batch, Received};
use crate::retry::{describe, is_retryable_status, Attempt};
use sluice_proto::contract::Reason;

#[derive(Clone)]
struct Entry {
    task_id: u64,
    address: Arc<str>,
    starting_round: u64,
    removed: bool,
}

/// Shared by the heartbeat loop and the round loop. A std `Mutex`: short
/// sections, no `.await` inside.
#[derive(Default)]
struct Shared {
    /// The first round not started yet.
    next_round: u64,
    /// The dispatcher asked us to start no new round.
    paused: bool,
    /// In the dispatcher's order.
    tasks: Vec<Entry>,
}

struct Ctx {
    dispatcher: DispatcherClient,
    client_id: u64,
    consumer_index: u32,
    opts: ReadOptions,
    shared: Mutex<Shared>,
    /// Bumped after every heartbeat answer.
    changed: watch::Sender<u64>,
}

impl Ctx {
    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_removed(&self, task_id: u64) -> bool {
        self.shared().tasks.iter().any(|t| t.task_id == task_id && t.removed)
    }

    fn mark_removed(&self, task_id: u64) {
        for t in self.shared().tasks.iter_mut().filter(|t| t.task_id == task_id) {
            t.removed = true;
        }
    }
}

pub(crate) async fn manage(
    dispatcher: DispatcherClient,
    client_id: u64,
    consumer_index: u32,
    opts: ReadOptions,
    tx: mpsc::Sender<Batch>,
) {
    let ctx = Arc::new(Ctx {
        dispatcher,
        client_id,
        consumer_index,
        opts,
        shared: Mutex::new(Shared::default()),
        changed: watch::channel(0).0,
    });
    let result = tokio::select! {
        r = heartbeats(&ctx) => r,
        r = rounds(&ctx, &tx) => r,
    };
    if let Err(e) = result {
        let _ = tx.send(Err(e)).await;
    }
}

async fn heartbeats(ctx: &Ctx) -> Result<(), ClientError> {
    let mut ticker = tokio::time::interval(ctx.opts.heartbeat_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sequence = 0u64;
    loop {
        ticker.tick().await;
        sequence += 1;
        let paused_at = {
            let s = ctx.shared();
            s.paused.then_some(s.next_round)
        };
        let req = pb::ClientHeartbeatRequest {
            client_id: ctx.client_id,
            consumer_index: Some(ctx.consumer_index),
            coordinated_paused_at: paused_at,
            coordinated_sequence: sequence,
            ..Default::default()
        };
        let hb = ctx.dispatcher.coordinated_heartbeat(req).await?;
        {
            let mut s = ctx.shared();
            for t in hb.tasks {
                match s.tasks.iter_mut().find(|e| e.task_id == t.task_id) {
                    Some(e) => e.removed |= t.coordinated_removed,
                    None => s.tasks.push(Entry {
                        task_id: t.task_id,
                        address: Arc::from(t.worker_address.as_str()),
                        starting_round: t.starting_round,
                        removed: t.coordinated_removed,
                    }),
                }
            }
            if s.paused != hb.coordinated_pause {
                debug!(paused = hb.coordinated_pause, next_round = s.next_round, "pause changed");
            }
            s.paused = hb.coordinated_pause;
        }
        ctx.changed.send_modify(|g| *g += 1);
    }
}

/// The tasks of the next round, once it may start; marks it started.
async fn next_round(ctx: &Ctx, round: &mut u64) -> Vec<Entry> {
    let mut changed = ctx.changed.subscribe();
    loop {
        {
            let mut s = ctx.shared();
            if !s.paused {
                let live = s.tasks.iter().filter(|t| !t.removed);
                // Rounds before the first live task's starting round have no task.
                if let Some(first) = live.map(|t| t.starting_round).min() {
                    *round = (*round).max(first);
                    let r = *round;
                    s.next_round = r + 1;
                    return s
                        .tasks
                        .iter()
                        .filter(|t| !t.removed && t.starting_round <= r)
                        .cloned()
                        .collect();
                }
            }
        }
        // Paused, or no task yet: the next heartbeat answer may change that.
        if changed.changed().await.is_err() {
            return vec![];
        }
    }
}

enum Got {
    Element(Element),
    Skipped,
    Removed,
}

async fn rounds(ctx: &Ctx, tx: &mpsc::Sender<Batch>) -> Result<(), ClientError> {
    let mut workers: HashMap<Arc<str>, WorkerClient<Authed>> = HashMap::new();
    let mut round = 0u64;
    loop {
        let tasks = next_round(ctx, &mut round).await;
        let mut fetches = Vec::with_capacity(tasks.len());
        for t in &tasks {
            let client = match workers.get(&t.address) {
                Some(c) => c.clone(),
                None => {
                    let c = WorkerClient::new(InterceptedService::new(
                        worker_channel(
                            &t.address,
                            &ctx.opts.worker_retry,
                            ctx.dispatcher.security(),
                        )?,
                        ctx.dispatcher.security().bearer().clone(),
                    ))
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES);
                    workers.insert(t.address.clone(), c.clone());
                    c
                }
            };
            fetches.push(fetch(ctx, client, t, round));
        }
        let results = futures::future::join_all(fetches).await;
        for (t, got) in tasks.iter().zip(results) {
            match got? {
                Got::Element(e) => {
                    if tx
                        .send(Ok(Received::plain(t.address.clone(), t.task_id, vec![e])))
                        .await
                        .is_err()
                    {
                        return Ok(()); // the stream was dropped
                    }
                }
                Got::Skipped => {}
                Got::Removed => ctx.mark_removed(t.task_id),
            }
        }
        round += 1;
    }
}

/// This consumer's element of `round` from one task.
async fn fetch(
    ctx: &Ctx,
    client: WorkerClient<Authed>,
    t: &Entry,
    round: u64,
) -> Result<Got, ClientError> {
    let policy = &ctx.opts.worker_retry;
    let req = pb::CoordinatedGetElementRequest {
        task_id: t.task_id,
        client_id: ctx.client_id,
        consumer_index: ctx.consumer_index,
        round,
    };
    let client = &client;
    let retry = policy.retry("worker", &t.address);
    retry
        .run(move |failures| async move {
            let mut client = client.clone();
            let call = client.coordinated_get_element(req);
            let status = match tokio::time::timeout(policy.attempt_timeout, call).await {
                Ok(Ok(resp)) => return answer_of(t, round, resp.into_inner()),
                Ok(Err(status)) => status,
                Err(_) => tonic::Status::deadline_exceeded(format!(
                    "no answer within {:?}",
                    policy.attempt_timeout
                )),
            };
            // A task the dispatcher removed is deleted on its worker: as good as gone.
            let reason = Reason::of(&status);
            let deleted = reason == Some(Reason::TaskDeleted);
            if !is_retryable_status(&status) && !deleted {
                let call = "CoordinatedGetElement";
                return Attempt::GiveUp(ClientError::from_worker(&t.address, call, &status));
            }
            if ctx.is_removed(t.task_id) {
                return Attempt::Done(Got::Removed);
            }
            // A worker that answers "not known yet" is alive: it has not heard of
            // the task from the dispatcher yet. Only an unreachable worker is voted
            // on, from its second failure in a row (this one) on.
            let alive = reason == Some(Reason::TaskNotYetKnown);
            if failures >= 1 && !alive {
                let vote = pb::MaybeRemoveTaskRequest {
                    task_id: t.task_id,
                    consumer_index: ctx.consumer_index,
                    round,
                    client_id: ctx.client_id,
                };
                debug!(task_id = t.task_id, round, "worker unreachable; voting to remove its task");
                match ctx.dispatcher.maybe_remove_task(vote).await {
                    Ok(r) if r.removed => {
                        debug!(task_id = t.task_id, round, "task removed by all consumers");
                        return Attempt::Done(Got::Removed);
                    }
                    Ok(_) => {}
                    Err(e) => return Attempt::GiveUp(e),
                }
            }
            Attempt::Failed(describe(&status))
        })
        .await
}

/// What a worker's answer to `CoordinatedGetElement` means for the retry loop.
fn answer_of(
    t: &Entry,
    round: u64,
    resp: pb::CoordinatedGetElementResponse,
) -> Attempt<Got, String> {
    if resp.waiting {
        // The worker is alive; the other consumers have not asked yet.
        return Attempt::Waiting;
    }
    if resp.skipped {
        return Attempt::Done(Got::Skipped);
    }
    let Some(element) = resp.element else {
        return Attempt::GiveUp(ClientError::Protocol {
            address: t.address.to_string(),
            message: format!("round {round} of task {}: no element", t.task_id),
        });
    };
    match Element::try_from(element) {
        Ok(e) => Attempt::Done(Got::Element(e)),
        Err(e) => Attempt::GiveUp(ClientError::Protocol {
            address: t.address.to_string(),
            message: format!("malformed element: {e}"),
        }),
    }
}
