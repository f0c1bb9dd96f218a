//! Coordinated (round-robin) reads on the worker: one [`Rounds`] per coordinated
//! task, in front of the task's bounded buffer.
//!
//! ```text
//!  pipeline thread ──▶ mpsc (num_consumers) ──▶ prefetched (≤ num_consumers) ──▶ round r:
//!                                                                  consumer i gets element i
//! ```
//!
//! A consumer asks for (round r, consumer i). A round starts when all
//! `num_consumers` consumers asked for it: the runner then takes `num_consumers`
//! elements, waiting at most [`ROUND_FILL_WAIT`] for the pipeline; if it cannot,
//! the *whole* round is skipped (every consumer is told `skipped`), and the
//! elements it had are kept for the next round. A request waits at most
//! [`REQUEST_WAIT`] for the others, then answers `waiting` and the consumer asks
//! again: no request blocks unboundedly, and a consumer that keeps getting
//! `waiting` knows the worker is alive.
//!
//! A request for a round older than the current one is refused with
//! FailedPrecondition: the usual cause is a consumer that restarted (from round 0)
//! under the same job name while the others went on. A pipeline that ends is
//! FailedPrecondition too: coordinated reads need an infinite dataset.
//!
//! The service looks the task up and hands [`Rounds::get_element`] the running
//! task's buffer and its stop signal; this module knows nothing of the task table.
//!
//! Soft state: the current round and the buffer exist only in this process. A
//! restarted worker's task starts from "no round yet" and serves the first round
//! all consumers ask for.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use sluice_proto::v1 as pb;
use tokio::sync::{watch, Mutex};
use tonic::Status;

use crate::buffer::{StopReason, TaskBuffer, Took};

/// How long a round start waits for the pipeline before skipping the round.
pub(crate) const ROUND_FILL_WAIT: Duration = Duration::from_millis(100);
/// How long a request waits for the other consumers before answering `waiting`.
pub(crate) const REQUEST_WAIT: Duration = Duration::from_secs(1);

pub(crate) struct Rounds {
    num_consumers: u32,
    /// A tokio mutex: a round start holds it while it waits (bounded) for elements.
    state: Mutex<RoundState>,
    /// Bumped when a round starts: waiting requests look again.
    started: watch::Sender<u64>,
}

#[derive(Default)]
struct RoundState {
    /// The round being served; `None` before the first.
    current: Option<u64>,
    /// Consumers that asked for each round not started yet.
    asked: BTreeMap<u64, BTreeSet<u32>>,
    /// The current round's element per consumer, taken as served; `None`: skipped.
    elements: Option<Vec<Option<pb::Element>>>,
    /// Taken from the task buffer for the next round (fewer than `num_consumers`).
    prefetched: Vec<pb::Element>,
    /// Elements taken from the pipeline so far.
    taken: u64,
    /// Sticky: every later request gets it.
    failed: Option<Status>,
}

impl Rounds {
    pub(crate) fn new(num_consumers: u32) -> Self {
        Rounds {
            num_consumers: num_consumers.max(1),
            state: Mutex::new(RoundState::default()),
            started: watch::channel(0).0,
        }
    }

    /// Answers one CoordinatedGetElement on the running task whose elements are
    /// in `buffer`; `stopped` resolves when that task is stopped (deleted, or the
    /// worker shutting down).
    pub(crate) async fn get_element(
        &self,
        buffer: &TaskBuffer,
        stopped: impl Future<Output = StopReason>,
        req: &pb::CoordinatedGetElementRequest,
    ) -> Result<pb::CoordinatedGetElementResponse, Status> {
        let task_id = req.task_id;
        tokio::select! {
            biased;
            answer = self.get(buffer, req.consumer_index, req.round) => answer,
            reason = stopped => {
                // A round that already started is still served to the consumers that
                // asked for it: a worker stopping between two consumers' answers
                // would otherwise leave them a round apart.
                match self.serve_started(task_id, req.consumer_index, req.round).await {
                    Some(answer) => answer,
                    None => Err(reason.status(task_id)),
                }
            }
        }
    }

    async fn get(
        &self,
        buffer: &TaskBuffer,
        consumer: u32,
        round: u64,
    ) -> Result<pb::CoordinatedGetElementResponse, Status> {
        let n = self.num_consumers;
        if consumer >= n {
            return Err(Status::invalid_argument(format!(
                "consumer_index={consumer} must be less than num_consumers={n}"
            )));
        }
        let deadline = tokio::time::Instant::now() + REQUEST_WAIT;
        let mut started = self.started.subscribe();
        loop {
            {
                let mut st = self.state.lock().await;
                if let Some(failed) = &st.failed {
                    return Err(failed.clone());
                }
                match st.current {
                    Some(current) if round < current => {
                        return Err(Status::failed_precondition(format!(
                            "consumer {consumer} asked task {} for round {round}, but this task \
                             is already at round {current} (a consumer restarted into a \
                             finished round? Restart all consumers of the job, under a new job \
                             name)",
                            buffer.task_id()
                        )))
                    }
                    Some(current) if round == current => {
                        return serve(&mut st, buffer.task_id(), consumer, round)
                    }
                    _ => {}
                }
                let asked = st.asked.entry(round).or_default();
                asked.insert(consumer);
                if asked.len() as u32 >= n {
                    self.start_round(&mut st, buffer, round).await?;
                    self.started.send_modify(|g| *g += 1);
                    return serve(&mut st, buffer.task_id(), consumer, round);
                }
            }
            if tokio::time::timeout_at(deadline, started.changed()).await.is_err() {
                return Ok(pb::CoordinatedGetElementResponse {
                    waiting: true,
                    ..Default::default()
                });
            }
        }
    }

    /// This consumer's answer if `round` is the round being served.
    async fn serve_started(
        &self,
        task_id: u64,
        consumer: u32,
        round: u64,
    ) -> Option<Result<pb::CoordinatedGetElementResponse, Status>> {
        let mut st = self.state.lock().await;
        (st.current == Some(round)).then(|| serve(&mut st, task_id, consumer, round))
    }

    async fn start_round(
        &self,
        st: &mut RoundState,
        buffer: &TaskBuffer,
        round: u64,
    ) -> Result<(), Status> {
        let n = self.num_consumers as usize;
        let fill_deadline = tokio::time::Instant::now() + ROUND_FILL_WAIT;
        while st.prefetched.len() < n {
            let left = fill_deadline.saturating_duration_since(tokio::time::Instant::now());
            match buffer.take_one(left).await {
                Ok(Took::Element(e)) => {
                    st.taken += 1;
                    st.prefetched.push(e);
                }
                Ok(Took::Nothing) => break,
                Ok(Took::Ended) => {
                    let status = Status::failed_precondition(format!(
                        "coordinated task {}: the pipeline ended after {} element(s), but \
                         coordinated reads need an infinite dataset (end it with repeat())",
                        buffer.task_id(),
                        st.taken
                    ));
                    st.failed = Some(status.clone());
                    return Err(status);
                }
                Err(status) => {
                    st.failed = Some(status.clone());
                    return Err(status);
                }
            }
        }
        st.elements = if st.prefetched.len() == n {
            Some(st.prefetched.drain(..).map(Some).collect())
        } else {
            tracing::debug!(
                task_id = buffer.task_id(),
                round,
                have = st.prefetched.len(),
                "round skipped"
            );
            None
        };
        st.current = Some(round);
        st.asked.retain(|r, _| *r > round);
        Ok(())
    }
}

fn serve(
    st: &mut RoundState,
    task_id: u64,
    consumer: u32,
    round: u64,
) -> Result<pb::CoordinatedGetElementResponse, Status> {
    let Some(elements) = &mut st.elements else {
        return Ok(pb::CoordinatedGetElementResponse { skipped: true, ..Default::default() });
    };
    match elements.get_mut(consumer as usize).and_then(Option::take) {
        Some(element) => {
            Ok(pb::CoordinatedGetElementResponse { element: Some(element), ..Default::default() })
        }
        None => Err(Status::failed_precondition(format!(
            "consumer {consumer} asked task {task_id} for round {round}, but this task already \
             answered it for that round (a consumer restarted into a finished round? Restart \
             all consumers of the job, under a new job name)"
        ))),
    }
}
