//! The dispatcher's Prometheus metrics (`sluice dispatcher --metrics-addr`).
//!
//! ```text
//!  scrape ──► StateCollector ──read_local──► State ──► StateGauges::of (pure)
//!                   └────────raft metrics──► role, term, log/applied/snapshot index
//!  Core::propose ──► Counters (`counters.rs`; this process: proposed / failed by command kind)
//!  GetSplit handler ──► Counters::get_split_request
//!  WorkerHeartbeat handler ──► WorkerReports (`worker_reports.rs`) ──► worker_errors_ignored
//! ```
//!
//! The gauges are computed from the replicated [`State`] at scrape time, so there
//! is no second source of truth to drift: each node reports its own replica (a
//! follower's may lag by what it has not applied yet; `sluice_raft_leader` tells
//! which node's view is the leader's). The counters are soft state of this process
//! and start from zero when it restarts.
//!
//! Label sets are bounded: nothing is labelled by job, iteration, task or worker
//! (`sluice_worker_errors_ignored` is the total over workers; `sluice status`
//! shows each worker's).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::core::Core;
use crate::state::State;
use crate::worker_reports::WorkerReports;

/// Every metric of this node: the counters of `core`, the state's gauges and
/// what workers' heartbeats reported to this node.
pub(crate) fn registry(core: Arc<Core>, reports: Arc<WorkerReports>) -> Registry {
    let mut r = sluice_metrics::registry();
    core.counters().register(&mut r);
    r.register_collector(Box::new(StateCollector { core, reports }));
    r
}

/// What the state says, summed over the registry (no per-job labels: unbounded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StateGauges {
    pub datasets: u64,
    pub jobs: u64,
    pub workers_registered: u64,
    pub workers_lost: u64,
    pub iterations_active: u64,
    pub iterations_finished: u64,
    pub iterations_garbage_collected: u64,
    pub lost_splits: u64,
    pub lost_elements: u64,
    pub lost_tasks: u64,
    pub clients_active: u64,
    pub splits_handed_out: u64,
    pub split_elements_handed_out: u64,
}

impl StateGauges {
    pub(crate) fn of(s: &State) -> StateGauges {
        let mut g = StateGauges {
            datasets: s.datasets.len() as u64,
            jobs: s.jobs.len() as u64,
            clients_active: s.clients.len() as u64,
            ..StateGauges::default()
        };
        for w in s.workers.values() {
            if w.lost {
                g.workers_lost += 1;
            } else {
                g.workers_registered += 1;
            }
        }
        for it in s.iterations.values() {
            g.iterations_active += u64::from(it.is_live());
            g.iterations_finished += u64::from(it.finished);
            g.iterations_garbage_collected += u64::from(it.garbage_collected);
            g.lost_splits += it.lost_split_count();
            g.lost_elements += it.lost_elements();
            g.lost_tasks += it.lost_tasks.len() as u64;
            let (splits, elements) = it.handed_out(s.source_cardinality_of(it.job_id).unwrap_or(0));
            g.splits_handed_out += splits;
            g.split_elements_handed_out += elements;
        }
        g
    }

    /// (name, help, value) of each gauge.
    fn rows(&self) -> [(&'static str, &'static str, u64); 13] {
        [
            ("datasets", "Datasets registered", self.datasets),
            ("jobs", "Jobs created", self.jobs),
            (
                "workers_registered",
                "Workers registered and not declared lost",
                self.workers_registered,
            ),
            (
                "workers_lost",
                "Workers declared lost by the worker timeout and not registered again",
                self.workers_lost,
            ),
            (
                "iterations_active",
                "Iterations still handing out work (neither finished nor garbage-collected)",
                self.iterations_active,
            ),
            ("iterations_finished", "Iterations whose every task ended", self.iterations_finished),
            (
                "iterations_garbage_collected",
                "Iterations collected after the job GC timeout without a consumer",
                self.iterations_garbage_collected,
            ),
            (
                "lost_splits",
                "DYNAMIC: splits granted to tasks whose worker was lost or restarted before \
                 it could deliver them (the last range of each such task), over all iterations",
                self.lost_splits,
            ),
            (
                "lost_elements",
                "DYNAMIC: source elements in the lost splits, over all iterations",
                self.lost_elements,
            ),
            (
                "lost_tasks",
                "Tasks ended because their worker was lost, over all iterations",
                self.lost_tasks,
            ),
            (
                "clients_active",
                "Consumers registered with an iteration and not released",
                self.clients_active,
            ),
            (
                "splits_handed_out",
                "DYNAMIC: splits handed out so far, summed over the split cursors of all \
                 iterations",
                self.splits_handed_out,
            ),
            (
                "split_elements_handed_out",
                "DYNAMIC: source elements in the splits handed out so far",
                self.split_elements_handed_out,
            ),
        ]
    }
}

/// Computes the gauges on each scrape from this node's replica and Raft metrics.
struct StateCollector {
    core: Arc<Core>,
    reports: Arc<WorkerReports>,
}

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCollector")
    }
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    // Ends with a full stop, as the registry writes the help of registered metrics.
    g.encode(enc.encode_descriptor(name, &format!("{help}."), None, g.metric_type())?)
}

impl Collector for StateCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let state = self.core.read_local(StateGauges::of);
        for (name, help, v) in state.rows() {
            gauge(&mut enc, name, help, v)?;
        }
        // Soft state of this node: the last totals the workers' heartbeats carried.
        let ignored =
            self.reports.errors_ignored().values().fold(0u64, |a, n| a.saturating_add(*n));
        gauge(
            &mut enc,
            "worker_errors_ignored",
            "Elements the ignore_errors stages of the workers that heartbeat to this node \
             skipped since each worker started (a user function failed on them), summed over \
             workers",
            ignored,
        )?;
        let m = self.core.raft().metrics().borrow().clone();
        let leader = u64::from(m.state == openraft::ServerState::Leader);
        let raft = [
            ("raft_leader", "1 if this node is the Raft leader, else 0", leader),
            ("raft_term", "This node's current Raft term", m.current_term),
            (
                "raft_last_log_index",
                "Index of the last entry in this node's log (0: none)",
                m.last_log_index.unwrap_or(0),
            ),
            (
                "raft_applied_index",
                "Index of the last entry applied to this node's state (0: none)",
                m.last_applied.map_or(0, |l| l.index),
            ),
            (
                "raft_snapshot_index",
                "Index of the last entry in this node's latest snapshot (0: none)",
                m.snapshot.map_or(0, |l| l.index),
            ),
        ];
        for (name, help, v) in raft {
            gauge(&mut enc, name, help, v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::limits::Limits;
    use crate::state::Mode;
    use sluice_dataset::DatasetDef;

    fn apply(s: &mut State, cmd: Command) -> crate::command::Response {
        crate::apply(s, cmd).expect("applied")
    }

    #[test]
    fn gauges_count_workers_iterations_clients_and_lost_splits_from_the_state() {
        let mut s = State::default();
        assert_eq!(StateGauges::of(&s), StateGauges::default());
        apply(
            &mut s,
            Command::RegisterWorker {
                address: "w1".into(),
                worker_uid: 1,
                functions: vec![],
                python_version: None,
                limits: Limits::default(),
            },
        );
        apply(
            &mut s,
            Command::RegisterWorker {
                address: "w2".into(),
                worker_uid: 2,
                functions: vec![],
                python_version: None,
                limits: Limits::default(),
            },
        );
        let def = DatasetDef::range(100);
        apply(
            &mut s,
            Command::RegisterDataset { dataset_id: None, def, limits: Limits::default() },
        );
        let dataset_id = s.datasets.keys().next().unwrap().clone();
        apply(
            &mut s,
            Command::GetOrCreateJob {
                dataset_id,
                mode: Mode::Dynamic,
                job_name: None,
                target_workers: Default::default(),
                static_workers: vec![],
                cross_trainer_cache: false,
                num_consumers: None,
                limits: Limits::default(),
            },
        );
        let job_id = *s.jobs.keys().next().unwrap();
        apply(
            &mut s,
            Command::GetOrCreateIteration {
                job_id,
                repetition: 0,
                elements_per_split: 10,
                limits: Limits::default(),
            },
        );
        let g = StateGauges::of(&s);
        assert_eq!((g.workers_registered, g.iterations_active, g.clients_active), (2, 1, 1));

        let task_of = |s: &State, w: &str| *s.workers[w].active_tasks.iter().next().unwrap();
        let (t1, t2) = (task_of(&s, "w1"), task_of(&s, "w2"));
        let split = |task_id, worker_uid| Command::GetSplit {
            task_id,
            worker_uid,
            sequence: 1,
            provider: 0,
            repetition: 0,
            max_splits: 2,
        };
        apply(&mut s, split(t1, 1));
        apply(&mut s, split(t2, 2));
        let g = StateGauges::of(&s);
        assert_eq!((g.splits_handed_out, g.split_elements_handed_out), (4, 40));

        apply(&mut s, Command::WorkerLost { address: "w1".into(), worker_uid: 1 });
        let g = StateGauges::of(&s);
        assert_eq!((g.workers_registered, g.workers_lost), (1, 1));
        assert_eq!((g.lost_tasks, g.lost_splits, g.lost_elements), (1, 2, 20));
        assert_eq!(g.iterations_active, 1, "w2's task still runs");
    }
}
