//! The consumers of an exactly-once scenario: a group of trainers reading one
//! named job exactly-once, taking positions at synchronized checkpoints, and
//! restarted from the last complete checkpoint (with another number of
//! trainers) when the fault executor asks.
//!
//! ```text
//!  epoch e:  incarnation 0: C trainers ──(checkpoint rounds every CHECKPOINT_EVERY)──►
//!            RestartTrainers{k}: stop them all; merge their positions of the
//!            newest generation all of them took ─► incarnation 1: k trainers
//!            restored from it ─► … ─► every trainer of the last incarnation ends
//! ```
//!
//! What the history gets: each element as it is consumed (`Element`), each
//! position as it is taken (`Checkpoint`, after the elements it covers), and each
//! restart (`Restore`: who ended, who started, from which generation). The
//! checker (`checker/trainers.rs`) rolls back what ended trainers consumed after
//! the restored generation and demands every element exactly once in the rest.
//!
//! Why rounds and not a timer per trainer: a checkpoint of a training job is one
//! step of all its trainers. A trainer that is waiting for data when a round
//! starts takes the position as soon as it consumes again — and one position per
//! round it missed — so the k-th position of every trainer belongs to round k and
//! positions of one generation merge.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_positions::{Position, RecordSet};
use tokio::sync::{mpsc, watch, Mutex};
use tokio::task::JoinSet;

use crate::faults::execute::Quiesce;
pub use crate::faults::execute::RestartRequest;
use crate::history::Event;
use crate::recorder::Recorder;

/// Time between two checkpoint rounds.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(300);
/// The job every trainer reads.
const JOB: &str = "chaos-trainers";

/// `source` (`crate::data`) through a shuffle across units: elements leave the
/// workers in an order unrelated to their splits, so positions must name records.
pub fn dataset(source: DatasetDef) -> DatasetDef {
    source.shuffle(32, 11)
}

/// `range(n)` alone, for the deterministic order: it refuses stages that mix
/// splits or reorder elements (a shuffle, a batch), so element `v` is unit `v`.
pub fn ordered_dataset(n: u64) -> DatasetDef {
    DatasetDef::range(n as i64)
}

pub struct TrainerGroup {
    pub client: Client,
    pub dataset_id: String,
    pub consumers: u32,
    pub epochs: u32,
    pub recorder: Recorder,
    pub progress: Arc<AtomicU64>,
    pub quiesce: Quiesce,
    pub worker_policy: RetryPolicy,
    /// The runner's read settings: elements per message, messages buffered per
    /// reader, and how long one epoch may take.
    pub elements_per_message: u32,
    pub outstanding: usize,
    pub epoch_deadline: Duration,
    /// The deterministic order's seed: trainer `i` of every incarnation reads
    /// as consumer `i` of `consumers`, and a restart keeps `consumers`.
    pub order: Option<u64>,
}

/// Every position each trainer of an incarnation took: trainer → generation → it.
type Positions = Arc<Mutex<BTreeMap<u32, BTreeMap<u64, Position>>>>;

impl TrainerGroup {
    pub async fn run(self, mut restarts: mpsc::Receiver<RestartRequest>) {
        let mut next_id = 0u32;
        let mut restarts_closed = false;
        for epoch in 0..self.epochs {
            let deadline = tokio::time::Instant::now() + self.epoch_deadline;
            let mut count = self.consumers;
            let mut restore: Option<Position> = None;
            loop {
                let ids: Vec<u32> = (next_id..next_id + count).collect();
                next_id += count;
                let positions: Positions = Arc::default();
                let (round_tx, round_rx) = watch::channel(0u64);
                let mut trainers = JoinSet::new();
                for (index, &id) in (0u32..).zip(&ids) {
                    let t = Trainer {
                        id,
                        deterministic: self.order.map(|seed| (seed, count, index)),
                        epoch,
                        client: self.client.clone(),
                        dataset_id: self.dataset_id.clone(),
                        restore: restore.clone(),
                        recorder: self.recorder.clone(),
                        progress: self.progress.clone(),
                        quiesce: self.quiesce.clone(),
                        positions: positions.clone(),
                        rounds: round_rx.clone(),
                        worker_policy: self.worker_policy.clone(),
                        elements_per_message: self.elements_per_message,
                        outstanding: self.outstanding,
                    };
                    trainers.spawn(async move { (t.id, t.read().await) });
                }
                let mut ticker = tokio::time::interval(CHECKPOINT_EVERY);
                ticker.tick().await;
                let mut ended = 0;
                let request = loop {
                    tokio::select! {
                        _ = ticker.tick() => { round_tx.send_modify(|r| *r += 1); }
                        joined = trainers.join_next() => match joined {
                            Some(Ok((id, outcome))) => {
                                let t_ms = self.recorder.now();
                                self.recorder.record(Event::EpochEnd { t_ms, consumer: id, epoch, outcome }).await;
                                ended += 1;
                            }
                            Some(Err(e)) => tracing::error!(epoch, "a trainer task failed: {e}"),
                            None => break None,
                        },
                        r = restarts.recv(), if ended == 0 && !restarts_closed => match r {
                            Some(r) => break Some(r),
                            // The executor is done: no more restarts.
                            None => restarts_closed = true,
                        },
                        _ = tokio::time::sleep_until(deadline) => {
                            trainers.abort_all();
                            for &id in &ids {
                                let t_ms = self.recorder.now();
                                let outcome = format!("no end after {:?} (the harness's deadline)", self.epoch_deadline);
                                self.recorder.record(Event::EpochEnd { t_ms, consumer: id, epoch, outcome }).await;
                            }
                            break None;
                        }
                    }
                };
                let Some(request) = request else { break };
                // The training job "crashes": every trainer stops where it is.
                trainers.abort_all();
                while trainers.join_next().await.is_some() {}
                let taken = positions.lock().await;
                let (generation, from) = match newest_common(&taken, &ids) {
                    Some((g, merged)) => (Some(g), Some(merged)),
                    None => (None, restore.clone()),
                };
                drop(taken);
                // A deterministic order is a function of the number of consumers.
                if self.order.is_none() {
                    count = request.consumers.max(1);
                }
                let started: Vec<u32> = (next_id..next_id + count).collect();
                let t_ms = self.recorder.now();
                self.recorder
                    .record(Event::Restore { t_ms, epoch, generation, ended: ids, started })
                    .await;
                // No complete checkpoint yet: restore the epoch's start, an empty position.
                restore = Some(from.unwrap_or_else(|| Position {
                    job_name: JOB.into(),
                    dataset_id: self.dataset_id.clone(),
                    repetition: u64::from(epoch),
                    generation: 0,
                    consumed: RecordSet::new(),
                    merged_consumers: 1,
                }));
                let _ = request.done.send(());
            }
        }
        // Answer restarts asked after the last epoch: nothing is left to restart.
        restarts.close();
        while let Some(r) = restarts.recv().await {
            let _ = r.done.send(());
        }
    }
}

/// The newest generation every trainer of `ids` took a position of, and the
/// union of those positions.
fn newest_common(
    taken: &BTreeMap<u32, BTreeMap<u64, Position>>,
    ids: &[u32],
) -> Option<(u64, Position)> {
    let first = taken.get(ids.first()?)?;
    let generation = first
        .keys()
        .rev()
        .find(|g| ids.iter().all(|id| taken.get(id).is_some_and(|p| p.contains_key(g))))?;
    let all: Vec<&Position> = ids.iter().filter_map(|id| taken.get(id)?.get(generation)).collect();
    match Position::merge(all) {
        Ok(p) => Some((*generation, p)),
        Err(e) => {
            tracing::error!("positions of generation {generation} do not merge: {e}");
            None
        }
    }
}

struct Trainer {
    id: u32,
    /// (seed, consumers, this trainer's consumer index) of a deterministic read.
    deterministic: Option<(u64, u32, u32)>,
    epoch: u32,
    client: Client,
    dataset_id: String,
    restore: Option<Position>,
    recorder: Recorder,
    progress: Arc<AtomicU64>,
    quiesce: Quiesce,
    positions: Positions,
    rounds: watch::Receiver<u64>,
    worker_policy: RetryPolicy,
    elements_per_message: u32,
    outstanding: usize,
}

impl Trainer {
    /// Reads the epoch to its end; "end" or the error.
    async fn read(mut self) -> String {
        let mut opts = ReadOptions::new(ProcessingMode::Dynamic)
            .job_name(JOB)
            .max_outstanding_requests(self.outstanding)
            .worker_retry(self.worker_policy.clone())
            .exactly_once(true);
        opts.max_elements_per_message = self.elements_per_message;
        opts.repetition = u64::from(self.epoch);
        if let Some((seed, n, i)) = self.deterministic {
            opts = opts.deterministic(seed, n, i);
        }
        if let Some(p) = self.restore.take() {
            opts = opts.restore(p);
        }
        let stream = {
            let _entered = self.quiesce.enter().await;
            self.client.from_dataset_id(&self.dataset_id, opts).await
        };
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => return e.to_string(),
        };
        let mut rounds_taken = 0u64;
        while let Some(item) = stream.next().await {
            let value = match item.map_err(|e| e.to_string()).and_then(|el| crate::data::value(&el))
            {
                Ok(v) => v,
                Err(e) => return e,
            };
            let t_ms = self.recorder.now();
            let (consumer, epoch) = (self.id, self.epoch);
            self.recorder.record(Event::Element { t_ms, consumer, epoch, value }).await;
            self.progress.fetch_add(1, Ordering::Relaxed);
            // One position per checkpoint round since the last one taken.
            let round = *self.rounds.borrow();
            while rounds_taken < round {
                let position = match stream.position() {
                    Ok(p) => p,
                    Err(e) => return format!("taking a position: {e}"),
                };
                let generation = position.generation;
                let t_ms = self.recorder.now();
                self.recorder.record(Event::Checkpoint { t_ms, consumer, epoch, generation }).await;
                self.positions
                    .lock()
                    .await
                    .entry(consumer)
                    .or_default()
                    .insert(generation, position);
                rounds_taken += 1;
            }
        }
        "end".to_string()
    }
}
