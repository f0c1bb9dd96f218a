//! Coordinated (round-robin) reads: the leader's soft state and the two handlers
//! that use it — the coordinated-read part of `ClientHeartbeat` and `MaybeRemoveTask`.
//!
//! # The protocol
//! `num_consumers` = N consumers read a job in *rounds*: in round r each consumer
//! asks every task of the iteration, in the dispatcher's task order, for its
//! element of round r; a worker starts a round only when all N asked for it, and
//! gives consumer i element i (or tells all of them to skip it). So in every round
//! every consumer gets its element from the same worker, per task slot.
//!
//! **A worker joins** (pending-task protocol). `RegisterWorker` creates its task in
//! every unfinished coordinated iteration as *pending* (replicated): the worker runs
//! it at once, consumers do not read it yet. While an iteration has pending tasks,
//! the heartbeat answer says `coordinated_pause`: the consumer starts no new round
//! (rounds in flight finish) and reports, in its next heartbeat,
//! `coordinated_paused_at = n`, the first round it has not started. Once all N
//! consumers reported a pause, the leader proposes `CoordinatedPromoteTasks` with
//! `starting_round = max(n)`: every pending task joins at that round. Since every
//! consumer is paused at a round ≤ max(n), none has started it; the answer that
//! lifts the pause carries the task with its `starting_round`, so every consumer
//! reads it from the same round. Consumers paused below max(n) run the missing
//! rounds first; they can, because the others have already asked for them.
//!
//! This replaces tf.data's target-round guess (reject, then retry with offsets 2,
//! 4, 8, …): nobody guesses how far consumers will get in one heartbeat; they
//! stop and say where they are. The price is a pause of about two heartbeat
//! intervals each time workers join (several joining workers share one pause).
//!
//! **A worker dies.** A consumer that fails to reach a task's worker votes
//! `MaybeRemoveTask(task, consumer_index, round)`. A vote counts only while its RPC
//! waits (at most [`VOTE_WAIT`]); once all N consumers vote at the same time, the
//! leader proposes `CoordinatedRemoveTask` and every voter (and any later one) is
//! answered `removed = true`: each consumer skips the task from the round it
//! failed on. Unlike tf.data, votes for different rounds do not cancel each other
//! (a worker that died while answering a round may have answered some consumers
//! only; cancelling would leave the others retrying forever).
//!
//! # Soft state
//! Pause reports and votes live only in the leader's memory. A new leader (or a
//! new term) starts empty: consumers still paused report again with their next
//! heartbeat, and voters vote again after their RPC times out. Only the decisions
//! (promotion round, removal) are replicated. Reports carry a per-client sequence
//! number so a late duplicate of an old heartbeat cannot record a pause the
//! consumer has since left.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sluice_proto::v1 as pb;
use tokio::sync::watch;
use tonic::Status;

use crate::command::{Command, Response as R};
use crate::core::Core;
use crate::error::StateError;
use crate::state::{ClientId, IterationId, State, TaskId};

/// How long a `MaybeRemoveTask` vote waits for the other consumers' votes.
pub const VOTE_WAIT: Duration = Duration::from_secs(3);

pub(crate) struct CoordinatedReads {
    core: Arc<Core>,
    /// A std `Mutex`: short sections, never held across an `.await`.
    soft: Mutex<Soft>,
    /// Bumped whenever votes change or a task is removed: waiting voters re-check.
    votes_changed: watch::Sender<u64>,
    /// One promotion at a time (they are decided from the pause reports).
    promoting: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Soft {
    /// The Raft term this soft state belongs to.
    term: u64,
    consumers: HashMap<IterationId, BTreeMap<u32, Seen>>,
    /// task → consumer_index → round, for votes whose RPC is waiting.
    votes: HashMap<TaskId, BTreeMap<u32, u64>>,
}

/// The last heartbeat of one consumer.
struct Seen {
    client_id: ClientId,
    sequence: u64,
    paused_at: Option<u64>,
}

/// What a heartbeat needs from the replicated state.
struct View {
    response: pb::ClientHeartbeatResponse,
    num_consumers: Option<u32>,
    pending: bool,
}

fn unknown_client(client_id: ClientId) -> Status {
    StateError::not_found_hint(
        "iteration client",
        client_id.to_string(),
        "; it was released, or the dispatcher restarted without a work_dir (in-memory state \
         is lost on restart)",
    )
    .into()
}

impl CoordinatedReads {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        CoordinatedReads {
            core,
            soft: Mutex::new(Soft::default()),
            votes_changed: watch::channel(0).0,
            promoting: tokio::sync::Mutex::new(()),
        }
    }

    /// The soft state, emptied first if the term changed since it was written.
    fn soft(&self) -> MutexGuard<'_, Soft> {
        let term = self.core.raft().metrics().borrow().current_term;
        let mut soft = self.soft.lock().unwrap_or_else(|p| p.into_inner());
        if soft.term != term {
            *soft = Soft { term, ..Soft::default() };
        }
        soft
    }

    fn bump(&self) {
        self.votes_changed.send_modify(|g| *g += 1);
    }

    async fn view(&self, client_id: ClientId) -> Result<View, Status> {
        let view = self.core.read_leader(|s| view(s, client_id)).await?;
        view.ok_or_else(|| unknown_client(client_id))
    }

    /// `ClientHeartbeat` from a consumer of a coordinated read.
    pub(crate) async fn client_heartbeat(
        &self,
        req: pb::ClientHeartbeatRequest,
    ) -> Result<pb::ClientHeartbeatResponse, Status> {
        let client_id = req.client_id;
        let consumer_index = req.consumer_index.unwrap_or_default();
        let view = self.view(client_id).await?;
        let iteration_id = view.response.iteration_id;
        let Some(n) = view.num_consumers else {
            return Err(Status::failed_precondition(format!(
                "iteration {iteration_id} is not read in rounds (its job has no num_consumers), \
                 but client {client_id} sent consumer_index={consumer_index}"
            )));
        };
        if consumer_index >= n {
            return Err(Status::invalid_argument(format!(
                "consumer_index={consumer_index} must be less than num_consumers={n}"
            )));
        }
        let target = {
            let mut soft = self.soft();
            let seen = soft.consumers.entry(iteration_id).or_default();
            let entry = seen.entry(consumer_index).or_insert(Seen {
                client_id,
                sequence: req.coordinated_sequence,
                paused_at: None,
            });
            // A late duplicate of an older heartbeat of the same client says nothing new.
            if entry.client_id != client_id || req.coordinated_sequence >= entry.sequence {
                *entry = Seen {
                    client_id,
                    sequence: req.coordinated_sequence,
                    paused_at: req.coordinated_paused_at,
                };
            }
            if !view.pending {
                // Answered "no pause": the consumer goes on, its report is void.
                entry.paused_at = None;
            }
            all_paused(seen, n)
        };
        let Some(_) = target.filter(|_| view.pending) else {
            return Ok(view.response);
        };
        self.promote(iteration_id, n).await?;
        Ok(self.view(client_id).await?.response)
    }

    /// Promotes the pending tasks of an iteration if every consumer is paused.
    async fn promote(&self, iteration_id: IterationId, n: u32) -> Result<(), Status> {
        let _one_at_a_time = self.promoting.lock().await;
        // Re-checked under the promotion lock: a promotion that just ran voided
        // the reports it used.
        let target = {
            let soft = self.soft();
            soft.consumers.get(&iteration_id).and_then(|seen| all_paused(seen, n))
        };
        let Some(starting_round) = target else { return Ok(()) };
        let cmd = Command::CoordinatedPromoteTasks { iteration_id, starting_round };
        let promoted = self.core.propose(cmd).await?;
        if let Some(seen) = self.soft().consumers.get_mut(&iteration_id) {
            for s in seen.values_mut() {
                s.paused_at = None;
            }
        }
        if let R::CoordinatedPromoted { task_ids } = promoted {
            if !task_ids.is_empty() {
                tracing::info!(iteration_id, starting_round, ?task_ids, "tasks joined the rounds");
            }
        }
        Ok(())
    }

    /// `MaybeRemoveTask`: records the vote and waits (bounded) for all consumers'.
    pub(crate) async fn maybe_remove_task(
        &self,
        req: pb::MaybeRemoveTaskRequest,
    ) -> Result<pb::MaybeRemoveTaskResponse, Status> {
        let task_id = req.task_id;
        let removed = pb::MaybeRemoveTaskResponse { removed: true };
        let mut changed = self.votes_changed.subscribe();
        let Some((n, already)) = self.core.read_leader(|s| vote_view(s, task_id)).await? else {
            // As tf.data: an unknown task is as good as removed.
            return Ok(removed);
        };
        let Some(n) = n else {
            return Err(Status::failed_precondition(format!(
                "task {task_id} is not read in rounds; only coordinated tasks can be voted out"
            )));
        };
        if already {
            return Ok(removed);
        }
        if req.consumer_index >= n {
            return Err(Status::invalid_argument(format!(
                "consumer_index={} must be less than num_consumers={n}",
                req.consumer_index
            )));
        }
        let deadline = tokio::time::Instant::now() + VOTE_WAIT;
        loop {
            let unanimous = {
                let mut soft = self.soft();
                let votes = soft.votes.entry(task_id).or_default();
                votes.insert(req.consumer_index, req.round);
                (votes.len() as u32 >= n).then(|| votes.values().copied().max().unwrap_or(0))
            };
            self.bump();
            // Our own bump is no news to us.
            changed.borrow_and_update();
            if let Some(round) = unanimous {
                self.core.propose(Command::CoordinatedRemoveTask { task_id, round }).await?;
                tracing::info!(task_id, round, "task voted out by all consumers");
                self.soft().votes.remove(&task_id);
                self.bump();
                return Ok(removed);
            }
            let woke = tokio::time::timeout_at(deadline, changed.changed()).await;
            if let Some((_, true)) = self.core.read_leader(|s| vote_view(s, task_id)).await? {
                return Ok(removed);
            }
            if woke.is_err() {
                let mut soft = self.soft();
                if let Some(votes) = soft.votes.get_mut(&task_id) {
                    if votes.get(&req.consumer_index) == Some(&req.round) {
                        votes.remove(&req.consumer_index);
                    }
                }
                return Ok(pb::MaybeRemoveTaskResponse { removed: false });
            }
        }
    }
}

/// The round all N consumers are paused at or below (the max), if all are paused.
fn all_paused(seen: &BTreeMap<u32, Seen>, n: u32) -> Option<u64> {
    let paused: Vec<u64> =
        (0..n).map(|i| seen.get(&i).and_then(|s| s.paused_at)).collect::<Option<_>>()?;
    paused.into_iter().max()
}

fn view(s: &State, client_id: ClientId) -> Option<View> {
    let it = s.client_iteration(client_id)?;
    let rr = it.coordinated.as_ref();
    let tasks = crate::convert::task_infos(s, it);
    let pending = rr.is_some_and(|rr| !rr.pending.is_empty());
    Some(View {
        response: pb::ClientHeartbeatResponse {
            iteration_id: it.id,
            tasks,
            iteration_finished: it.finished,
            coordinated_pause: pending,
            // Coordinated reads poll; they do not long-poll.
            view_digest: 0,
            ..Default::default()
        },
        num_consumers: rr.map(|rr| rr.num_consumers),
        pending,
    })
}

/// For a known task: (its iteration's num_consumers if coordinated, removed?).
fn vote_view(s: &State, task_id: TaskId) -> Option<(Option<u32>, bool)> {
    let task = s.tasks.get(&task_id)?;
    let rr = s.iterations.get(&task.iteration_id).and_then(|it| it.coordinated.as_ref());
    Some((rr.map(|rr| rr.num_consumers), rr.is_some_and(|rr| rr.removed.contains_key(&task_id))))
}
