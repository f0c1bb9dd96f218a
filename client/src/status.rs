//! [`ServiceStatus`]: workers, datasets, jobs and the Raft position of one
//! dispatcher, as `Client::status` returns it. Domain types, not the wire's: the
//! processing mode is a [`ProcessingMode`], absent parts are `Option`s, and the
//! whole serialises (serde) for the Python binding and tools.

use std::collections::BTreeMap;

use serde::Serialize;
use sluice_proto::v1 as pb;

use crate::options::ProcessingMode;

/// What one dispatcher knows; `from_leader` says whether it was the leader (a
/// follower's registry may be stale).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServiceStatus {
    pub workers: Vec<WorkerStatus>,
    pub datasets: Vec<DatasetStatus>,
    pub jobs: Vec<JobStatus>,
    pub raft: Option<RaftStatus>,
    pub from_leader: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WorkerStatus {
    pub address: String,
    pub active_tasks: u32,
    /// Milliseconds since its last heartbeat reached this dispatcher.
    pub last_heartbeat_ms_ago: Option<u64>,
    /// Declared lost by the leader's worker timeout.
    pub lost: bool,
    pub worker_uid: u64,
    /// The Python version its Python processes run; `None`: it runs no Python
    /// stages (started without `--allow-python`).
    pub python_version: Option<String>,
    /// Elements its `ignore_errors` stages skipped since it started, as its last
    /// heartbeat to this dispatcher said; `None` before one did.
    pub errors_ignored: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DatasetStatus {
    pub dataset_id: String,
    pub source_cardinality: Option<u64>,
    /// The client identity (token name) that registered it; `None` without
    /// tokens (docs/security.md, "Quotas per client identity").
    pub owner: Option<String>,
    /// Its definition's size as held (0: not recorded).
    pub definition_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobStatus {
    pub job_id: u64,
    pub job_name: String,
    pub dataset_id: String,
    /// `None` for a mode this client does not know (a newer dispatcher).
    #[serde(serialize_with = "mode_name")]
    pub mode: Option<ProcessingMode>,
    pub iterations: Vec<IterationStatus>,
    /// The client identity that created it; `None` as for datasets.
    pub owner: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IterationStatus {
    pub iteration_id: u64,
    pub repetition: u64,
    pub tasks: u32,
    pub finished_tasks: u32,
    pub clients: u32,
    pub finished: bool,
    /// DYNAMIC: source elements handed out in the current repetition.
    pub split_cursor: Option<u64>,
    pub split_repetition: Option<u64>,
    /// DYNAMIC: splits (and their source elements) granted to tasks whose worker
    /// was lost or restarted.
    pub lost_splits: u64,
    pub lost_elements: u64,
    /// Tasks ended because their worker was lost.
    pub lost_tasks: u32,
    /// Collected after the job GC timeout without a consumer.
    pub garbage_collected: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RaftStatus {
    pub node_id: u64,
    /// "leader", "follower", "candidate", "learner" or "shutdown".
    pub role: String,
    pub term: u64,
    pub leader_id: Option<u64>,
    pub leader_address: String,
    pub last_log_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    /// Where this node journals ("memory://…" when nothing survives a restart).
    pub journal: String,
    /// Node id → address of every voter.
    pub members: BTreeMap<u64, String>,
}

fn mode_name<S: serde::Serializer>(m: &Option<ProcessingMode>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => s.serialize_str(&m.to_string()),
        None => s.serialize_none(),
    }
}

impl From<pb::GetStatusResponse> for ServiceStatus {
    fn from(s: pb::GetStatusResponse) -> Self {
        ServiceStatus {
            workers: s.workers.into_iter().map(WorkerStatus::from).collect(),
            datasets: s.datasets.into_iter().map(DatasetStatus::from).collect(),
            jobs: s.jobs.into_iter().map(JobStatus::from).collect(),
            raft: s.raft.map(RaftStatus::from),
            from_leader: s.from_leader,
        }
    }
}

impl From<pb::WorkerStatus> for WorkerStatus {
    fn from(w: pb::WorkerStatus) -> Self {
        WorkerStatus {
            address: w.address,
            active_tasks: w.active_tasks,
            last_heartbeat_ms_ago: w.last_heartbeat_ms_ago,
            lost: w.lost,
            worker_uid: w.worker_uid,
            python_version: Some(w.python_version).filter(|v| !v.is_empty()),
            errors_ignored: w.errors_ignored,
        }
    }
}

impl From<pb::DatasetStatus> for DatasetStatus {
    fn from(d: pb::DatasetStatus) -> Self {
        DatasetStatus {
            dataset_id: d.dataset_id,
            source_cardinality: d.source_cardinality,
            owner: Some(d.owner).filter(|o| !o.is_empty()),
            definition_bytes: d.definition_bytes,
        }
    }
}

impl From<pb::JobStatus> for JobStatus {
    fn from(j: pb::JobStatus) -> Self {
        JobStatus {
            job_id: j.job_id,
            job_name: j.job_name,
            dataset_id: j.dataset_id,
            mode: pb::ProcessingMode::try_from(j.mode).ok().and_then(ProcessingMode::from_wire),
            iterations: j.iterations.into_iter().map(IterationStatus::from).collect(),
            owner: Some(j.owner).filter(|o| !o.is_empty()),
        }
    }
}

impl From<pb::IterationStatus> for IterationStatus {
    fn from(i: pb::IterationStatus) -> Self {
        IterationStatus {
            iteration_id: i.iteration_id,
            repetition: i.repetition,
            tasks: i.tasks,
            finished_tasks: i.finished_tasks,
            clients: i.clients,
            finished: i.finished,
            split_cursor: i.split_cursor,
            split_repetition: i.split_repetition,
            lost_splits: i.lost_splits,
            lost_elements: i.lost_elements,
            lost_tasks: i.lost_tasks,
            garbage_collected: i.garbage_collected,
        }
    }
}

impl From<pb::RaftStatus> for RaftStatus {
    fn from(r: pb::RaftStatus) -> Self {
        RaftStatus {
            node_id: r.node_id,
            role: r.role,
            term: r.term,
            leader_id: r.leader_id,
            leader_address: r.leader_address,
            last_log_index: r.last_log_index,
            applied_index: r.applied_index,
            snapshot_index: r.snapshot_index,
            journal: r.journal,
            members: r.members.into_iter().collect(),
        }
    }
}
