//! One simulated consumer: what a reader of the client crate sends the dispatcher
//! (`client/src/client.rs`, `client/src/view_poll.rs`), without reading elements
//! from workers. It registers the shared dataset (`RegisterDataset` with a fixed
//! id, as every reader of a named dataset does), gets its named DYNAMIC job and
//! iteration 0 (`GetOrCreateJob`, `GetOrCreateIteration`), then long-polls
//! `ClientHeartbeat` with its `known_view`: one call outstanding, held by the
//! dispatcher up to `long_poll`, asking for an unchanged view without its task
//! list (`omit_unchanged_tasks`); after an unchanged answer the next call starts
//! no sooner than `min(heartbeat_interval, long_poll)` after the last one began.

use std::time::Duration;

use sluice_client::DispatcherClient;
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Code;

use super::ops::{Event, Op, Ops};

#[derive(Clone, Copy, Debug)]
pub struct ConsumerParams {
    /// `ReadOptions::heartbeat_interval` (100 ms).
    pub heartbeat_interval: Duration,
    /// `ReadOptions::long_poll` (1 s).
    pub long_poll: Duration,
}

/// Registers the dataset and joins `job_name`'s iteration 0; the client id, or
/// `None` after an error (recorded).
pub async fn join(
    client: &DispatcherClient,
    ops: &Ops,
    def: &pb::DatasetDef,
    dataset_id: &str,
    job_name: &str,
) -> Option<u64> {
    let t0 = Instant::now();
    let req = pb::RegisterDatasetRequest {
        dataset: Some(def.clone()),
        dataset_id: dataset_id.to_string(),
    };
    match client.register_dataset(req).await {
        Ok(_) => ops.time(Op::RegisterDataset, t0.elapsed()),
        Err(e) => {
            ops.error(Op::RegisterDataset, &e);
            return None;
        }
    }
    let t0 = Instant::now();
    let req = pb::GetOrCreateJobRequest {
        dataset_id: dataset_id.to_string(),
        mode: pb::ProcessingMode::Dynamic as i32,
        job_name: job_name.to_string(),
        ..Default::default()
    };
    let job_id = match client.get_or_create_job(req).await {
        Ok(r) => {
            ops.time(Op::CreateJob, t0.elapsed());
            r.job_id
        }
        Err(e) => {
            ops.error(Op::CreateJob, &e);
            return None;
        }
    };
    let t0 = Instant::now();
    let req = pb::GetOrCreateIterationRequest { job_id, repetition: 0, ..Default::default() };
    match client.get_or_create_iteration(req).await {
        Ok(r) => {
            ops.time(Op::CreateIteration, t0.elapsed());
            Some(r.client_id)
        }
        Err(e) => {
            ops.error(Op::CreateIteration, &e);
            None
        }
    }
}

/// The reader's long poll of its iteration, until `stop` or the dispatcher forgets
/// the client. `joined` hears `true` once the first heartbeat (answered at once)
/// succeeded and was timed, `false` if the dispatcher forgot the client first: the
/// setup phase ends only then, so the figures reset at its end cannot drop it.
pub async fn heartbeat_loop(
    client: &DispatcherClient,
    ops: &Ops,
    client_id: u64,
    p: ConsumerParams,
    mut stop: watch::Receiver<bool>,
    joined: mpsc::Sender<bool>,
) {
    let mut joined = Some(joined);
    let pace = p.heartbeat_interval.min(p.long_poll);
    let wait_ms = u32::try_from(p.long_poll.as_millis()).unwrap_or(u32::MAX);
    let mut known_view = 0u64;
    let mut changed = true;
    let mut last_start: Option<Instant> = None;
    while !*stop.borrow() {
        if let (false, Some(start)) = (changed, last_start) {
            tokio::select! {
                _ = tokio::time::sleep_until(start + pace) => {}
                _ = stop.changed() => return,
            }
        }
        let t0 = Instant::now();
        last_start = Some(t0);
        let req = pb::ClientHeartbeatRequest {
            client_id,
            wait_for_change_ms: wait_ms,
            known_view,
            omit_unchanged_tasks: true,
            ..Default::default()
        };
        let result = tokio::select! {
            r = client.client_heartbeat_with(req) => r,
            _ = stop.changed() => return,
        };
        let took = t0.elapsed();
        match result {
            Ok(resp) => {
                if known_view == 0 {
                    ops.time(Op::ClientHeartbeat, took);
                } else if resp.view_digest == known_view {
                    ops.time(Op::ClientHeartbeatOverHold, took.saturating_sub(p.long_poll));
                } else {
                    ops.count(Event::ClientViewChanged, 1);
                }
                changed = resp.view_digest != 0 && resp.view_digest != known_view;
                known_view = resp.view_digest;
                if let Some(joined) = joined.take() {
                    let _ = joined.send(true).await;
                }
            }
            Err(e) if e.code() == Some(Code::NotFound) => {
                ops.count(Event::ClientLost, 1);
                if let Some(joined) = joined.take() {
                    let _ = joined.send(false).await;
                }
                return;
            }
            Err(e) => {
                ops.error(Op::ClientHeartbeat, &e);
                changed = false;
            }
        }
    }
}
