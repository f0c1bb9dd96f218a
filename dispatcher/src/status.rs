//! Renders the state as the `GetStatus` answer that `sluice status` prints.

use std::collections::HashMap;
use std::time::Instant;

use sluice_proto::v1 as pb;

use crate::convert::mode_to_wire;
use crate::state::State;

/// `heartbeats` and `errors_ignored` are this node's soft state (what workers'
/// heartbeats told it), the rest the replicated state.
pub fn render(
    s: &State,
    heartbeats: &HashMap<String, Instant>,
    errors_ignored: &HashMap<String, u64>,
) -> pb::GetStatusResponse {
    let workers = s
        .workers
        .values()
        .map(|w| pb::WorkerStatus {
            address: w.address.clone(),
            active_tasks: w.active_tasks.len() as u32,
            last_heartbeat_ms_ago: heartbeats
                .get(&w.address)
                .map(|t| t.elapsed().as_millis() as u64),
            lost: w.lost,
            worker_uid: w.worker_uid,
            python_version: w.python_version.clone().unwrap_or_default(),
            errors_ignored: errors_ignored.get(&w.address).copied(),
        })
        .collect();
    let datasets = s
        .datasets
        .values()
        .map(|d| {
            let record = s.owners.datasets.get(&d.id);
            pb::DatasetStatus {
                dataset_id: d.id.clone(),
                source_cardinality: d.source_cardinality,
                owner: record.and_then(|r| r.owner.clone()).unwrap_or_default(),
                definition_bytes: record.map_or(0, |r| r.bytes),
            }
        })
        .collect();
    let jobs = s
        .jobs
        .values()
        .map(|j| pb::JobStatus {
            job_id: j.id,
            job_name: j.name.clone(),
            dataset_id: j.dataset_id.clone(),
            mode: mode_to_wire(j.mode) as i32,
            owner: s.owners.jobs.get(&j.id).cloned().unwrap_or_default(),
            // Every iteration of the job, also one garbage-collected and replaced.
            iterations: s
                .iterations
                .values()
                .filter(|it| it.job_id == j.id)
                .map(|it| pb::IterationStatus {
                    iteration_id: it.id,
                    repetition: it.repetition,
                    tasks: it.tasks.len() as u32,
                    finished_tasks: it
                        .tasks
                        .iter()
                        .filter(|t| s.tasks.get(*t).is_some_and(|t| t.finished))
                        .count() as u32,
                    clients: it.clients.len() as u32,
                    finished: it.finished,
                    split_cursor: it.cursors.first().map(|c| c.next),
                    split_repetition: it.cursors.first().map(|c| c.repetition),
                    lost_splits: it.lost_split_count(),
                    lost_elements: it.lost_elements(),
                    lost_tasks: it.lost_tasks.len() as u32,
                    garbage_collected: it.garbage_collected,
                })
                .collect(),
        })
        .collect();
    pb::GetStatusResponse { workers, datasets, jobs, raft: None, from_leader: false }
}
