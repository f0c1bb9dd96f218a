//! Deterministic order (docs/exactly-once.md, "Deterministic order"): a task of
//! a job read by `n` consumers in a seeded order routes each split's elements to
//! the one consumer `k % n` of the split's place `k`.
//!
//! ```text
//!  splits (GetSplit) ──place──▶ Grants ◀──lookup── router task ◀── TaskBuffer (pipeline, source order)
//!                                                      │
//!                     one bounded queue per consumer ◀─┘──▶ producer of GetElements{consumer_index}
//! ```
//!
//! The pipeline is per-record (no batch or shuffle: the job was refused
//! otherwise), so elements leave it in source order, each with its own record
//! first in its origin and any records the pipeline dropped before it after. The
//! router cuts every origin by place: the element keeps the runs of its own
//! place; runs and unit ends of another place go to that place's consumer as the
//! origin of a message of their own (consumed on receipt). Each message carries
//! its split (`ElementBatch.split`: place, whole range, floor), and every grant is
//! announced to its consumer as soon as it is made, even when it yields nothing
//! (a split all consumed before a restore): the consumer tells from its records
//! when a split is complete.
//!
//! A consumer that does not read holds its queue full and the pipeline with it;
//! the reader reads every stream eagerly and the dispatcher hands out no split
//! far past the consumed watermark, which bounds what that costs (see the doc).
//! The task finishes when every consumer took its end of sequence.
//!
//! Soft state: the grants and queues exist only in this process; a lost task's
//! splits are granted again, with their places, to another task.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use sluice_positions::{Origin, Run, Tag};
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, Notify};
use tonic::Status;

use crate::buffer::{Batch, Limits, StopReason, TaskBuffer};

/// What the router reads: a task's buffer and its stop signal (`task.rs`
/// implements it; this module does not name the task, which holds it).
pub(crate) trait Source: Send + Sync + 'static {
    fn buffer(&self) -> &TaskBuffer;
    fn stopped(&self) -> impl std::future::Future<Output = StopReason> + Send;
}

/// The most consumers of a task (the dispatcher's `order::MAX_CONSUMERS`).
pub(crate) const MAX_CONSUMERS: u32 = 4096;
/// Messages queued per consumer.
const QUEUE_MESSAGES: usize = 4;
/// Grants remembered for looking places up (a task's pipeline is past older ones).
const KEEP_GRANTS: usize = 1024;

/// One consumer's queue: messages, or the status that ends its streams.
type QueueTx = mpsc::Sender<Result<Batch, Status>>;

/// The grants of one task, as its split provider received them.
#[derive(Default)]
pub(crate) struct Grants {
    inner: Mutex<GrantsInner>,
    /// Woken when a grant is added (the router announces it).
    added: Notify,
}

#[derive(Default)]
struct GrantsInner {
    /// Recent grants' splits, newest last.
    known: VecDeque<pb::SplitNotice>,
    /// Not announced yet.
    fresh: Vec<pb::SplitNotice>,
}

impl Grants {
    /// Called by the split provider (pipeline thread) for every grant, before
    /// the source reads it. A std `Mutex`: held only to push or look up.
    pub(crate) fn granted(&self, split: pb::SplitNotice) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.known.push_back(split);
        if g.known.len() > KEEP_GRANTS {
            g.known.pop_front();
        }
        g.fresh.push(split);
        drop(g);
        self.added.notify_one();
    }

    fn take_fresh(&self) -> Vec<pb::SplitNotice> {
        std::mem::take(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()).fresh)
    }

    /// The split holding `unit`.
    fn split_of(&self, unit: u64) -> Option<pb::SplitNotice> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.known.iter().rev().find(|s| s.begin <= unit && unit < s.end).copied()
    }
}

/// A task's per-consumer queues.
pub(crate) struct Ordered {
    pub grants: Arc<Grants>,
    consumers: u32,
    queues: Vec<tokio::sync::Mutex<mpsc::Receiver<Result<Batch, Status>>>>,
    senders: Mutex<Option<Vec<QueueTx>>>,
    /// Consumers that took their end of sequence.
    ended: AtomicU32,
}

impl Ordered {
    pub(crate) fn new(consumers: u32) -> Self {
        let (senders, queues) = (0..consumers.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::channel(QUEUE_MESSAGES);
                (tx, tokio::sync::Mutex::new(rx))
            })
            .unzip();
        Ordered {
            grants: Arc::default(),
            consumers: consumers.max(1),
            queues,
            senders: Mutex::new(Some(senders)),
            ended: AtomicU32::new(0),
        }
    }

    pub(crate) fn consumers(&self) -> u32 {
        self.consumers
    }

    /// The next message for `consumer` (`< consumers`, checked by the service).
    pub(crate) async fn next_batch(&self, consumer: u32) -> Result<Batch, Status> {
        let mut rx = self.queues[consumer as usize].lock().await;
        match rx.recv().await {
            Some(batch) => batch,
            // The router ended without an end (the task stopped): say so.
            None => Err(Status::unavailable("the task's router stopped")),
        }
    }

    /// Counts a consumer's end of sequence; true for the last one (the task
    /// then finishes).
    pub(crate) fn end_taken(&self) -> bool {
        self.ended.fetch_add(1, Ordering::SeqCst) + 1 == self.consumers
    }

    /// Starts the router reading `task` (which holds this) on `runtime`.
    pub(crate) fn start<S: Source>(&self, task: Arc<S>, runtime: &tokio::runtime::Handle) {
        let senders = self.senders.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(senders) = senders {
            let router = Router { grants: self.grants.clone(), senders, held: BTreeMap::new() };
            runtime.spawn(router.run(task));
        }
    }
}

/// Messages per place waiting to be sent, and the queues.
struct Router {
    grants: Arc<Grants>,
    senders: Vec<QueueTx>,
    /// place → the message being filled for it.
    held: BTreeMap<u64, Batch>,
}

impl Router {
    async fn run<S: Source>(mut self, task: Arc<S>) {
        let limits = Limits::bounded(256, 4 << 20);
        loop {
            if self.announce().await.is_err() {
                return;
            }
            let batch = tokio::select! {
                b = task.buffer().next_batch(limits) => b,
                _ = self.grants.added.notified() => continue,
                _ = task.stopped() => return,
            };
            let sent = match batch {
                Ok(batch) => self.route(batch, task.buffer()).await,
                Err(status) => {
                    for tx in &self.senders {
                        let _ = tx.send(Err(status.clone())).await;
                    }
                    return;
                }
            };
            if sent.is_err() {
                return;
            }
        }
    }

    /// Announces fresh grants to their consumers (a message with no element).
    async fn announce(&mut self) -> Result<(), ()> {
        for split in self.grants.take_fresh() {
            let batch = Batch { split: Some(split), ..Batch::default() };
            self.send(split.order_index, batch).await?;
        }
        Ok(())
    }

    async fn send(&self, place: u64, batch: Batch) -> Result<(), ()> {
        let consumer = (place % self.senders.len() as u64) as usize;
        self.senders[consumer].send(Ok(batch)).await.map_err(|_| ())
    }

    /// Cuts a batch of the pipeline's elements by place and sends the pieces.
    async fn route(&mut self, batch: Batch, buffer: &TaskBuffer) -> Result<(), ()> {
        self.announce().await?;
        let mut origins = batch.origins.into_iter();
        for element in batch.elements {
            let origin = origins.next().flatten().map(Tag::into_origin).unwrap_or_default();
            let Some(own) = origin.runs.first().and_then(|r| self.grants.split_of(r.unit)) else {
                return self
                    .fail(format!("an element of units {:?} outside every grant", origin.runs))
                    .await;
            };
            let (kept, others) = cut(origin, own, &self.grants);
            // A message holds one split's elements in order: send what another
            // split filled before this element, then add it.
            self.flush_except(own.order_index).await?;
            self.add_others(others);
            let held = self.held.entry(own.order_index).or_default();
            held.split = Some(own);
            held.push(element, Some(Tag::from(kept)));
        }
        if batch.end_of_sequence {
            let (_, others) = cut(buffer.end_origin(), pb::SplitNotice::default(), &self.grants);
            self.add_others(others);
            self.flush_except(u64::MAX).await?;
            for i in 0..self.senders.len() as u64 {
                self.send(i, Batch { end_of_sequence: true, ..Batch::default() }).await?;
            }
            return Err(()); // the router is done
        }
        self.flush_except(u64::MAX).await
    }

    /// Adds origins of other places to their messages' own origins.
    fn add_others(&mut self, others: Vec<(pb::SplitNotice, Origin)>) {
        for (split, origin) in others {
            let held = self.held.entry(split.order_index).or_default();
            held.split = Some(split);
            held.own.append(origin);
        }
    }

    /// Sends every held message but `keep`'s.
    async fn flush_except(&mut self, keep: u64) -> Result<(), ()> {
        let places: Vec<u64> = self.held.keys().copied().filter(|p| *p != keep).collect();
        for place in places {
            if let Some(batch) = self.held.remove(&place) {
                self.send(place, batch).await?;
            }
        }
        Ok(())
    }

    async fn fail(&self, why: String) -> Result<(), ()> {
        let status = Status::internal(format!(
            "deterministic order: {why}; the dispatcher and this worker disagree on the \
             task's grants (upgrade both to the same version)"
        ));
        for tx in &self.senders {
            let _ = tx.send(Err(status.clone())).await;
        }
        Err(())
    }
}

/// Splits `origin` into the runs and unit ends of `own`'s split and those of
/// other splits (by the grants' ranges), each with its split.
fn cut(
    origin: Origin,
    own: pb::SplitNotice,
    grants: &Grants,
) -> (Origin, Vec<(pb::SplitNotice, Origin)>) {
    let mut kept = Origin::default();
    let mut others: Vec<(pb::SplitNotice, Origin)> = Vec::new();
    let mut other = |unit: u64| -> Option<usize> {
        let split = grants.split_of(unit)?;
        match others.iter().position(|(s, _)| s.order_index == split.order_index) {
            Some(i) => Some(i),
            None => {
                others.push((split, Origin::default()));
                Some(others.len() - 1)
            }
        }
    };
    let mine = |unit: u64| own.begin <= unit && unit < own.end;
    let mut runs: Vec<(usize, Run)> = Vec::new();
    for r in origin.runs {
        if mine(r.unit) {
            kept.push_run(r);
        } else if let Some(i) = other(r.unit) {
            runs.push((i, r));
        }
    }
    let mut ends = Vec::new();
    for (u, n) in origin.unit_ends {
        if mine(u) {
            kept.push_end(u, n);
        } else if let Some(i) = other(u) {
            ends.push((i, u, n));
        }
    }
    for (i, r) in runs {
        others[i].1.push_run(r);
    }
    for (i, u, n) in ends {
        others[i].1.push_end(u, n);
    }
    (kept, others)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(index: u64, begin: u64, end: u64) -> pb::SplitNotice {
        pb::SplitNotice { order_index: index, begin, end, counted: true, floor: 0 }
    }

    #[test]
    fn an_origin_is_cut_by_split_and_foreign_records_keep_their_split() {
        let grants = Grants::default();
        grants.granted(split(0, 4, 6));
        grants.granted(split(1, 0, 2));
        let mut origin = Origin::record(0, 3);
        origin.push_run(Run { unit: 5, first: 0, count: 2 });
        origin.push_end(5, 2);
        origin.push_run(Run::record(1, 0));
        let (kept, others) = cut(origin, split(1, 0, 2), &grants);
        assert_eq!(kept.runs, vec![Run::record(0, 3), Run::record(1, 0)]);
        assert_eq!(others.len(), 1);
        assert_eq!(others[0].0.order_index, 0);
        assert_eq!(others[0].1.runs, vec![Run { unit: 5, first: 0, count: 2 }]);
        assert_eq!(others[0].1.unit_ends, vec![(5, 2)]);
        assert_eq!(grants.take_fresh().len(), 2);
        assert!(grants.take_fresh().is_empty());
    }
}
