//! [`RemoteSplitProvider`]: the source of a DYNAMIC task's pipeline asks the
//! dispatcher for its next split instead of reading its own range.
//!
//! Exactly-once hand-out rests on the request key (task_id, worker_uid, sequence):
//! the dispatcher answers a resent key with the same split and never takes a
//! second one, so `sequence` advances only after an answer arrived. Retries of one
//! call happen inside `DispatcherClient` with the same request, hence the same key.
//!
//! Exactly-once jobs (docs/exactly-once.md): a split's `skip_runs` (consumed
//! records of a re-granted unit) go to the tagged source through
//! `take_skip_runs`, and a `wait` answer (lost records not handed out yet) is
//! followed, after a pause of 20 ms doubling to 1 s, by a request with the next
//! sequence: a `wait` is an answer like any other.
//!
//! Grant size and asking ahead (`size`): the provider asks for about 20 ms of
//! the task's work per grant, learned from its own pace, and, when a split is
//! shorter than that, sends the next request as the source starts reading a
//! grant, so the round trip overlaps the work. One request is in flight at a
//! time, so the key rule above is unchanged: the request ahead carries the next
//! sequence, and its answer is the next one the source reads. A grant asked
//! ahead is read even if the worker starts draining meanwhile (the dispatcher
//! handed it out); a `repeat` of an epoch left early waits for it and drops it.
//! What a killed worker takes with it outside exactly-once jobs is at most two
//! grants of about 20 ms each (one split each when a split is longer), besides
//! its buffers (docs/guarantees.md, D2).
//!
//! Soft state: `sequence` and `repetition` live only in this process. A restarted
//! worker has a new `worker_uid`, so its keys start again at 0 without colliding
//! with the old process's; splits the old process took but never delivered are lost
//! (the at-most-once side of dynamic sharding).

mod size;

#[cfg(test)]
pub(crate) use size::GrantSize;
#[cfg(not(test))]
use size::GrantSize;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_client::DispatcherClient;
use sluice_dataset::{DatasetError, SplitProvider, SplitRange};
use sluice_positions::wire::runs_from_flat;
use sluice_positions::Run;
use sluice_proto::v1 as pb;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::buffer::StopReason;
use crate::ordered::Grants;

/// An answer to come: the call runs on the runtime, the pipeline thread waits.
type Answer = oneshot::Receiver<Result<pb::GetSplitResponse, String>>;

/// The first pause after a `wait` answer (exactly-once jobs: lost records wait
/// until every consumer acknowledged the loss); it doubles up to the max.
const WAIT_BACKOFF_MIN: Duration = Duration::from_millis(20);
const WAIT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The most skip runs one grant carries (docs/exactly-once.md, "Bounds").
const MAX_SKIP_RUNS: usize = 65_536;

pub(crate) struct RemoteSplitProvider {
    dispatcher: DispatcherClient,
    /// The worker's runtime: calls run there, the pipeline thread waits for them.
    runtime: Handle,
    /// Fires when the task is deleted or the worker stops, so a pipeline thread
    /// waiting for a split is released at once instead of after the retry deadline.
    stop: watch::Receiver<Option<StopReason>>,
    /// True once the worker drains: no new split is taken, so the pipeline ends
    /// with the splits it holds, delivers them and the task finishes normally.
    draining: watch::Receiver<bool>,
    task_id: u64,
    worker_uid: u64,
    split_provider_index: u32,
    sequence: u64,
    repetition: u64,
    /// How many splits to ask for, and whether to ask ahead.
    size: GrantSize,
    /// The request sent ahead (its sequence is `sequence`): splits asked, answer.
    ahead: Option<(u32, Answer)>,
    /// The grant the source reads: when it took it, its units, splits asked.
    reading: Option<(Instant, u64, u32)>,
    /// End of splits was answered once because of draining.
    drained: bool,
    /// Exactly-once: the skip runs of the split returned last, until the source
    /// takes them.
    skip_runs: Vec<Run>,
    /// Deterministic order: where each grant's place is recorded before the
    /// source reads it, and whether units have counted records.
    grants: Option<(Arc<Grants>, bool)>,
}

impl RemoteSplitProvider {
    pub(crate) fn new(
        dispatcher: DispatcherClient,
        runtime: Handle,
        stop: watch::Receiver<Option<StopReason>>,
        task_id: u64,
        worker_uid: u64,
        split_provider_index: u32,
        max_splits: u32,
    ) -> Self {
        RemoteSplitProvider {
            dispatcher,
            runtime,
            stop,
            draining: watch::channel(false).1,
            task_id,
            worker_uid,
            split_provider_index,
            sequence: 0,
            repetition: 0,
            size: GrantSize::new(max_splits),
            ahead: None,
            reading: None,
            drained: false,
            skip_runs: Vec::new(),
            grants: None,
        }
    }

    /// Records every grant's place in `grants` (deterministic order).
    pub(crate) fn ordered(mut self, grants: Option<(Arc<Grants>, bool)>) -> Self {
        self.grants = grants;
        self
    }

    /// A deterministic-order grant's split, recorded before the source reads it;
    /// a grant without a place is refused.
    fn record_place(&self, split: &pb::Split) -> Result<(), DatasetError> {
        let Some((grants, counted)) = &self.grants else { return Ok(()) };
        let Some(order_index) = split.order_index else {
            return Err(DatasetError::Split(format!(
                "dispatcher answered GetSplit for deterministic-order task {} without the \
                 split's place (order_index); run the dispatcher and the workers at the same \
                 version",
                self.task_id
            )));
        };
        grants.granted(pb::SplitNotice {
            order_index,
            begin: split.order_begin,
            end: split.order_end,
            counted: *counted,
            floor: split.order_floor,
        });
        Ok(())
    }

    /// Sizes grants with `size` instead of the default (tests).
    #[cfg(test)]
    pub(crate) fn sized(mut self, size: GrantSize) -> Self {
        self.size = size;
        self
    }

    /// Follows the worker's draining flag (see `drain.rs`).
    pub(crate) fn draining(mut self, draining: watch::Receiver<bool>) -> Self {
        self.draining = draining;
        self
    }

    /// Sends the request with the current sequence for `max_splits` splits.
    fn send(&self, max_splits: u32) -> Answer {
        let req = pb::GetSplitRequest {
            task_id: self.task_id,
            worker_uid: self.worker_uid,
            sequence: self.sequence,
            split_provider_index: self.split_provider_index,
            repetition: self.repetition,
            max_splits,
        };
        self.call(req)
    }

    /// Runs one GetSplit on the runtime; [`Self::wait`] waits for it on this
    /// (non-runtime) thread.
    ///
    /// Spawning rather than `Handle::block_on`: `block_on` panics on timers once the
    /// runtime is shut down, while a task spawned on a shut-down runtime is just
    /// dropped, which closes the oneshot and ends the wait with an error.
    fn call(&self, req: pb::GetSplitRequest) -> Answer {
        let dispatcher = self.dispatcher.clone();
        let mut stop = self.stop.clone();
        let (tx, rx) = oneshot::channel();
        let call = async move {
            let result = tokio::select! {
                r = dispatcher.get_split(req) => r.map_err(|e| e.to_string()),
                _ = stop.wait_for(Option::is_some) => Err("the task was stopped".to_string()),
            };
            let _ = tx.send(result);
        };
        self.runtime.spawn(call.instrument(tracing::Span::current()));
        rx
    }

    fn wait(answer: Answer) -> Result<pb::GetSplitResponse, DatasetError> {
        match answer.blocking_recv() {
            Ok(result) => result.map_err(DatasetError::Split),
            Err(_) => Err(DatasetError::Split("the worker's runtime has shut down".into())),
        }
    }

    /// The split's skip runs, refused unless well formed, within the split and
    /// within the bound of one grant.
    fn skip_runs_of(&self, split: &pb::Split) -> Result<Vec<Run>, DatasetError> {
        let bad = |why: String| {
            DatasetError::Split(format!(
                "dispatcher answered GetSplit for task {} with malformed skip_runs for split \
                 [{}, {}): {why}; the dispatcher and this worker disagree on the exactly-once \
                 protocol (upgrade both to the same version)",
                self.task_id, split.begin, split.end
            ))
        };
        if split.skip_runs.len() / 3 > MAX_SKIP_RUNS {
            return Err(bad(format!(
                "{} runs, above the {MAX_SKIP_RUNS} of one grant",
                split.skip_runs.len() / 3
            )));
        }
        let runs = runs_from_flat(&split.skip_runs).map_err(|e| bad(e.to_string()))?;
        if let Some(r) = runs.iter().find(|r| r.unit < split.begin || r.unit >= split.end) {
            return Err(bad(format!("run {r:?} is outside the split")));
        }
        Ok(runs)
    }

    /// Sleeps `pause` on the runtime (a `wait` answer), released early when the
    /// task stops (then `Err`: the pipeline ends with the task).
    fn pause(&self, pause: Duration) -> Result<(), DatasetError> {
        let mut stop = self.stop.clone();
        let (tx, rx) = oneshot::channel();
        self.runtime.spawn(async move {
            let stopped = tokio::select! {
                _ = tokio::time::sleep(pause) => false,
                _ = stop.wait_for(Option::is_some) => true,
            };
            let _ = tx.send(stopped);
        });
        match rx.blocking_recv() {
            Ok(false) => Ok(()),
            Ok(true) => Err(DatasetError::Split("the task was stopped".into())),
            Err(_) => Err(DatasetError::Split("the worker's runtime has shut down".into())),
        }
    }
}

impl SplitProvider for RemoteSplitProvider {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        if let Some((since, units, asked)) = self.reading.take() {
            self.size.record(asked, units, since.elapsed());
        }
        if self.ahead.is_none() && *self.draining.borrow() {
            if !self.drained {
                tracing::info!(task_id = self.task_id, "draining: no new split");
                self.drained = true;
                return Ok(None);
            }
            // Asked again (a `repeat` started another epoch): wait for the task to
            // stop instead of spinning through empty epochs.
            let mut stop = self.stop.clone();
            let (tx, rx) = oneshot::channel::<()>();
            self.runtime.spawn(async move {
                let _ = stop.wait_for(Option::is_some).await;
                let _ = tx.send(());
            });
            let _ = rx.blocking_recv();
            return Err(DatasetError::Split("the worker drained and stopped the task".into()));
        }
        let mut backoff = WAIT_BACKOFF_MIN;
        loop {
            let (asked, answer) = match self.ahead.take() {
                Some(ahead) => ahead,
                None => {
                    let asked = self.size.ask();
                    (asked, self.send(asked))
                }
            };
            let resp = Self::wait(answer)?;
            // The dispatcher has answered this key; the next call must take a new split.
            self.sequence += 1;
            if resp.end_of_splits {
                tracing::debug!(repetition = self.repetition, "end of splits");
                return Ok(None);
            }
            if resp.wait {
                // Exactly-once: lost records wait for the consumers' acknowledgements.
                tracing::debug!(?backoff, "GetSplit answered wait");
                self.pause(backoff)?;
                backoff = (backoff * 2).min(WAIT_BACKOFF_MAX);
                if *self.draining.borrow() {
                    return self.next_split();
                }
                continue;
            }
            return match resp.split {
                Some(s) if s.begin <= s.end => {
                    self.skip_runs = self.skip_runs_of(&s)?;
                    self.record_place(&s)?;
                    tracing::debug!(
                        begin = s.begin,
                        end = s.end,
                        asked,
                        skips = self.skip_runs.len(),
                        "got split"
                    );
                    self.reading = Some((Instant::now(), s.end - s.begin, asked));
                    if self.size.ahead() && !*self.draining.borrow() {
                        let next = self.size.ask();
                        self.ahead = Some((next, self.send(next)));
                    }
                    Ok(Some(SplitRange { begin: s.begin, end: s.end }))
                }
                other => Err(DatasetError::Split(format!(
                    "dispatcher answered GetSplit for task {} with an invalid split {other:?}",
                    self.task_id
                ))),
            };
        }
    }

    fn take_skip_runs(&mut self) -> Vec<Run> {
        std::mem::take(&mut self.skip_runs)
    }

    fn reset(&mut self) -> Result<(), DatasetError> {
        // An epoch left before its end (`take` before `repeat`): the grant
        // asked ahead was handed out, so its answer is waited for, its sequence
        // used, and its splits dropped with the rest of the epoch's.
        if let Some((_, answer)) = self.ahead.take() {
            Self::wait(answer)?;
            self.sequence += 1;
        }
        self.reading = None;
        self.repetition += 1;
        Ok(())
    }
}
