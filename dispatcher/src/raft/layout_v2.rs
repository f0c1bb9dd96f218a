//! Persisted layout version 2 of the state, frozen (`versioned.rs`, "How a layout
//! change is handled"): `State` as it was before version 3 appended
//! `ExactlyOnceState::orders` (deterministic order), and the snapshot around it.
//! Every other type is unchanged, so it is the current one.
//!
//! Never edit these types: they describe bytes already on disk.

use std::collections::BTreeMap;

use openraft::{BasicNode, LogId, StoredMembership};
use serde::{Deserialize, Serialize};
use sluice_positions::UnitRecords;

use super::NodeId;
use crate::exactly_once::{ExactlyOnceState as Current, Progress};
use crate::state::{
    ClientId, Dataset, DatasetId, Iteration, IterationId, Job, JobId, Task, TaskId, Worker,
};

/// `crate::exactly_once::ExactlyOnceState` of layout version 2.
#[derive(Serialize, Deserialize)]
pub struct ExactlyOnceState {
    pub jobs: BTreeMap<JobId, UnitRecords>,
    pub iterations: BTreeMap<IterationId, Progress>,
}

/// `crate::state::State` of layout version 2.
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

/// `applied::Applied` of layout version 2.
#[derive(Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub state: State,
}

/// Version 2 → 3: no job had a deterministic order.
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
            exactly_once: Current {
                jobs: s.exactly_once.jobs,
                iterations: s.exactly_once.iterations,
                orders: BTreeMap::new(),
            },
            owners: Default::default(),
        }
    }
}
