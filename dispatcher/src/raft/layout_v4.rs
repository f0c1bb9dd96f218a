//! Persisted layout versions 3 and 4 of the state, frozen (`versioned.rs`, "How
//! a layout change is handled"): `State` as it was before version 5 appended
//! its `owners` section (quotas per client identity, `owners.rs`), and the
//! snapshot around it. Every other type is unchanged, so it is the current one.
//!
//! Never edit these types: they describe bytes already on disk.

use std::collections::BTreeMap;

use openraft::{BasicNode, LogId, StoredMembership};
use serde::{Deserialize, Serialize};

use super::NodeId;
use crate::exactly_once::ExactlyOnceState;
use crate::state::{
    ClientId, Dataset, DatasetId, Iteration, IterationId, Job, JobId, Task, TaskId, Worker,
};

/// `crate::state::State` of layout versions 3 and 4.
#[derive(Serialize, Deserialize)]
pub struct State {
    pub datasets: BTreeMap<DatasetId, Dataset>,
    pub jobs: BTreeMap<JobId, Job>,
    pub jobs_by_name: BTreeMap<String, JobId>,
    pub iterations: BTreeMap<IterationId, Iteration>,
    pub tasks: BTreeMap<TaskId, Task>,
    pub workers: BTreeMap<String, Worker>,
    pub clients: BTreeMap<ClientId, IterationId>,
    pub next_dataset_id: u64,
    pub next_job_id: JobId,
    pub next_iteration_id: IterationId,
    pub next_task_id: TaskId,
    pub next_client_id: ClientId,
    pub exactly_once: ExactlyOnceState,
}

/// `applied::Applied` of layout versions 3 and 4.
#[derive(Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub state: State,
}

/// Version 4 → 5: nothing was charged to anyone. Datasets already held have
/// no record: they count against the dispatcher-wide caps only, and their
/// definitions' bytes against none.
impl From<State> for crate::state::State {
    fn from(s: State) -> Self {
        crate::state::State {
            datasets: s.datasets,
            jobs: s.jobs,
            jobs_by_name: s.jobs_by_name,
            iterations: s.iterations,
            tasks: s.tasks.into_iter().collect(),
            workers: s.workers,
            clients: s.clients,
            next_dataset_id: s.next_dataset_id,
            next_job_id: s.next_job_id,
            next_iteration_id: s.next_iteration_id,
            next_task_id: s.next_task_id,
            next_client_id: s.next_client_id,
            exactly_once: s.exactly_once,
            owners: Default::default(),
        }
    }
}
