//! One simulated worker: what `worker/src/heartbeat.rs` and a DYNAMIC task's
//! split provider (`worker/src/splits.rs`) send, without pipelines or element
//! streams. It registers, then long-polls `WorkerHeartbeat` (its running tasks,
//! the tasks that reached end of splits, `wait_for_change_ms` = the heartbeat
//! interval, the interval's pause after an empty answer that was not held), starts
//! and stops the tasks the answers name, and — a second loop — asks `GetSplit` for
//! one of its DYNAMIC tasks (round robin) every `split_interval`, with the
//! (task, uid, sequence) key a real split provider uses. Like a real worker, it
//! leaves its task list out while its tasks have the digest the last answer
//! named. The address is made up (`127.0.0.1:<index+1>`): the dispatcher never
//! dials workers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_client::DispatcherClient;
use sluice_proto::task_set::task_set_digest;
use sluice_proto::v1 as pb;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::Code;

use super::ops::{Event, Op, Ops};

#[derive(Clone, Copy, Debug)]
pub struct WorkerParams {
    /// The worker's heartbeat interval (`WorkerConfig::heartbeat_interval`).
    pub heartbeat_interval: Duration,
    /// Time between two `GetSplit`s of this worker.
    pub split_interval: Duration,
}

/// What a worker knows of its tasks (its `state.rs` table, reduced).
#[derive(Default)]
struct Tasks {
    /// Running task → next split sequence (`None`: not a DYNAMIC task).
    running: BTreeMap<u64, Option<u64>>,
    /// Reached end of splits, not yet reported by a successful heartbeat.
    unreported: BTreeSet<u64>,
    /// The last task `GetSplit` asked for (round robin).
    last: u64,
    /// `task_set_digest` of `running`'s ids, until `running` changes.
    digest: Option<u64>,
}

impl Tasks {
    fn running_digest(&mut self) -> u64 {
        *self.digest.get_or_insert_with(|| task_set_digest(self.running.keys().copied()))
    }
    fn stop(&mut self, id: u64) -> bool {
        self.digest = None;
        self.running.remove(&id).is_some()
    }
}

pub struct SimWorker {
    pub client: DispatcherClient,
    pub address: String,
    pub uid: u64,
    tasks: Mutex<Tasks>,
}

impl SimWorker {
    pub fn new(client: DispatcherClient, index: usize, run: u64) -> SimWorker {
        SimWorker {
            client,
            address: format!("127.0.0.1:{}", index + 1),
            // Distinct per worker and per run, like a worker's random uid.
            uid: (run << 24) ^ index as u64 ^ 0x51u64 << 56,
            tasks: Mutex::default(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Tasks> {
        // Held for a few map operations, never across an await.
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `RegisterWorker`, timed; starts the tasks it answers with.
    pub async fn register(&self, ops: &Ops) -> bool {
        let req = pb::RegisterWorkerRequest {
            address: self.address.clone(),
            worker_uid: self.uid,
            functions: vec![],
            python_version: String::new(),
        };
        let t0 = Instant::now();
        match self.client.register_worker(req).await {
            Ok(resp) => {
                ops.time(Op::RegisterWorker, t0.elapsed());
                *self.table() = Tasks::default();
                self.start(&resp.tasks, ops);
                true
            }
            Err(e) => {
                ops.error(Op::RegisterWorker, &e);
                false
            }
        }
    }

    fn start(&self, defs: &[pb::TaskDef], ops: &Ops) {
        let mut t = self.table();
        for d in defs {
            let dynamic = d.mode == pb::ProcessingMode::Dynamic as i32;
            t.running.entry(d.task_id).or_insert(dynamic.then_some(0));
            t.digest = None;
        }
        ops.count(Event::TasksStarted, defs.len() as u64);
    }

    /// Heartbeats until `stop`; registers again when the dispatcher forgot it.
    pub async fn heartbeat_loop(
        &self,
        ops: &Ops,
        p: WorkerParams,
        mut stop: watch::Receiver<bool>,
    ) {
        let interval = p.heartbeat_interval;
        let mut pause: Option<Duration> = None;
        // The last answer's digest of this worker's active tasks: while the running
        // tasks have it, the list is left out (`worker/src/heartbeat.rs`).
        let mut active_digest: Option<u64> = None;
        while !*stop.borrow() {
            if let Some(pause) = pause.take() {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => return,
                }
            }
            let req = {
                let mut t = self.table();
                let digest = t.running_digest();
                let omitted = active_digest == Some(digest);
                pb::WorkerHeartbeatRequest {
                    address: self.address.clone(),
                    worker_uid: self.uid,
                    current_tasks: if omitted {
                        vec![]
                    } else {
                        t.running.keys().copied().collect()
                    },
                    finished_tasks: t.unreported.iter().copied().collect(),
                    wait_for_change_ms: 0,
                    errors_ignored: 0,
                    current_tasks_digest: digest,
                    current_tasks_omitted: omitted,
                }
            };
            let poll = req.finished_tasks.is_empty();
            let req = pb::WorkerHeartbeatRequest {
                wait_for_change_ms: if poll { interval.as_millis() as u32 } else { 0 },
                ..req
            };
            let finished = req.finished_tasks.clone();
            let t0 = Instant::now();
            let result = tokio::select! {
                r = self.client.worker_heartbeat(req) => r,
                _ = stop.changed() => return,
            };
            let took = t0.elapsed();
            match result {
                Ok(resp) if resp.current_tasks_wanted => {
                    ops.count(Event::WorkerTasksWanted, 1);
                    self.table().unreported.retain(|id| !finished.contains(id));
                    active_digest = None;
                }
                Ok(resp) => {
                    active_digest = Some(resp.active_tasks_digest).filter(|d| *d != 0);
                    let empty = resp.new_tasks.is_empty() && resp.tasks_to_delete.is_empty();
                    match (poll && resp.long_polled, empty) {
                        (true, true) => {
                            ops.time(Op::WorkerHeartbeatOverHold, took.saturating_sub(interval))
                        }
                        (true, false) => ops.count(Event::WorkerPollAnswered, 1),
                        (false, _) => ops.time(Op::WorkerHeartbeat, took),
                    }
                    {
                        let mut t = self.table();
                        for id in &finished {
                            t.unreported.remove(id);
                        }
                        for id in &resp.tasks_to_delete {
                            t.stop(*id);
                        }
                    }
                    self.start(&resp.new_tasks, ops);
                    if poll && empty && !resp.long_polled {
                        pause = interval.checked_sub(took).filter(|p| !p.is_zero());
                    }
                }
                Err(e) if e.code() == Some(Code::NotFound) => {
                    ops.count(Event::WorkerReRegistered, 1);
                    if !self.register(ops).await {
                        pause = Some(interval);
                    }
                }
                Err(e) => {
                    ops.error(Op::WorkerHeartbeat, &e);
                    pause = Some(interval);
                }
            }
        }
    }

    /// One `GetSplit` every `split_interval` for the next DYNAMIC task, until `stop`.
    pub async fn split_loop(&self, ops: &Ops, p: WorkerParams, mut stop: watch::Receiver<bool>) {
        // Spread the fleet's calls over the interval instead of in lockstep.
        let phase = p.split_interval.mul_f64((self.uid % 1000) as f64 / 1000.0);
        let mut tick = tokio::time::interval_at(Instant::now() + phase, p.split_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            let next = {
                let mut t = self.table();
                let after = t.last;
                let pick = t
                    .running
                    .range(after + 1..)
                    .chain(t.running.range(..=after))
                    .find_map(|(id, seq)| seq.map(|s| (*id, s)));
                if let Some((id, _)) = pick {
                    t.last = id;
                }
                pick
            };
            let Some((task_id, sequence)) = next else { continue };
            let req = pb::GetSplitRequest {
                task_id,
                worker_uid: self.uid,
                sequence,
                split_provider_index: 0,
                repetition: 0,
                max_splits: 1,
            };
            let t0 = Instant::now();
            let result = tokio::select! {
                r = self.client.get_split(req) => r,
                _ = stop.changed() => return,
            };
            match result {
                Ok(resp) => {
                    ops.time(Op::GetSplit, t0.elapsed());
                    let mut t = self.table();
                    if let Some(seq) = t.running.get_mut(&task_id) {
                        *seq = Some(sequence + 1);
                    }
                    if resp.end_of_splits && t.stop(task_id) {
                        t.unreported.insert(task_id);
                    }
                }
                // The same key is asked again at the next tick, as a real
                // provider retries.
                Err(e) => ops.error(Op::GetSplit, &e),
            }
        }
    }
}

/// Runs a registered worker's two loops until `stop`.
pub async fn run(w: Arc<SimWorker>, ops: Arc<Ops>, p: WorkerParams, stop: watch::Receiver<bool>) {
    tokio::join!(w.heartbeat_loop(&ops, p, stop.clone()), w.split_loop(&ops, p, stop.clone()),);
}
