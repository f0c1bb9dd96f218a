//! A minimal in-test Dispatcher: RegisterWorker, WorkerHeartbeat and GetSplit over a
//! fixed set of tasks, with knobs to inject failures and watches to wait on.
//! Other methods answer Unimplemented.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_server::{Dispatcher, DispatcherServer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

/// How long a test waits for a condition before failing.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) fn task_def(task_id: u64, def: &DatasetDef, mode: pb::ProcessingMode) -> pb::TaskDef {
    pb::TaskDef {
        task_id,
        iteration_id: 100 + task_id,
        job_id: 200 + task_id,
        dataset_id: format!("ds-{task_id}"),
        dataset: Some(pb::DatasetDef::from(def)),
        mode: mode as i32,
        num_split_providers: u32::from(mode == pb::ProcessingMode::Dynamic),
        num_workers: 0,
        worker_index: 0,
        use_cross_trainer_cache: false,
        num_consumers: None,
        job_name: String::new(),
        ..Default::default()
    }
}

#[derive(Default)]
struct State {
    tasks: Vec<pb::TaskDef>,
    /// Split ranges handed out in order, once each, to whoever asks first.
    splits: Vec<(u64, u64)>,
    next_split: usize,
    /// (task_id, worker_uid, sequence) → the answer given, for idempotent resends.
    answered: HashMap<(u64, u64, u64), pb::GetSplitResponse>,
    /// GetSplit attempts to fail with Unavailable before answering.
    fail_get_split: u32,
    /// Every GetSplit fails with this non-retryable status.
    refuse_get_split: bool,
    /// The next heartbeat answers NotFound.
    forget_worker: bool,
    /// Heartbeats carrying finished tasks still to fail with Unavailable.
    refuse_finish_reports: u32,
    to_delete: BTreeSet<u64>,
    /// (sequence, repetition) of every GetSplit attempt.
    split_requests: Vec<(u64, u64)>,
    /// The `max_splits` of each GetSplit request, in order.
    split_asks: Vec<u32>,
    /// Exactly-once: split index → its `skip_runs`.
    skip_runs: HashMap<usize, Vec<u64>>,
    /// Exactly-once: GetSplit requests still to answer `wait` before any split.
    waits: u32,
}

struct Shared {
    state: Mutex<State>,
    finished: watch::Sender<BTreeSet<u64>>,
    registrations: watch::Sender<u32>,
    heartbeats: watch::Sender<u64>,
    split_attempts: watch::Sender<usize>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("mock state lock")
    }
}

pub(crate) struct MockDispatcher {
    address: String,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl MockDispatcher {
    pub(crate) async fn start(tasks: Vec<pb::TaskDef>) -> MockDispatcher {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock dispatcher");
        let address = listener.local_addr().expect("mock address").to_string();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { tasks, ..State::default() }),
            finished: watch::channel(BTreeSet::new()).0,
            registrations: watch::channel(0).0,
            heartbeats: watch::channel(0).0,
            split_attempts: watch::channel(0).0,
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let service = DispatcherServer::new(Service(shared.clone()));
        let server = tokio::spawn(async move {
            Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                    let _ = stopped.await;
                })
                .await
                .expect("mock dispatcher serves");
        });
        MockDispatcher { address, shared, stop: Some(stop), server: Some(server) }
    }

    pub(crate) fn address(&self) -> String {
        self.address.clone()
    }

    pub(crate) fn set_splits(&self, splits: Vec<(u64, u64)>) {
        self.shared.state().splits = splits;
    }

    /// Exactly-once: split `index` of `set_splits` comes with these skip runs.
    pub(crate) fn set_skip_runs(&self, index: usize, flat: Vec<u64>) {
        self.shared.state().skip_runs.insert(index, flat);
    }

    /// Exactly-once: the next `n` GetSplit requests are answered `wait`.
    pub(crate) fn answer_wait(&self, n: u32) {
        self.shared.state().waits = n;
    }

    pub(crate) fn fail_get_split_times(&self, n: u32) {
        self.shared.state().fail_get_split = n;
    }

    pub(crate) fn refuse_get_split(&self) {
        self.shared.state().refuse_get_split = true;
    }

    /// The next `n` heartbeats that report finished tasks fail (Unavailable).
    pub(crate) fn refuse_finish_reports(&self, n: u32) {
        self.shared.state().refuse_finish_reports = n;
    }

    pub(crate) fn forget_worker(&self) {
        self.shared.state().forget_worker = true;
    }

    pub(crate) fn delete_task(&self, task_id: u64) {
        self.shared.state().to_delete.insert(task_id);
    }

    /// Sequence numbers of every GetSplit attempt, failed ones included.
    pub(crate) fn split_sequences(&self) -> Vec<u64> {
        self.split_requests().into_iter().map(|(sequence, _)| sequence).collect()
    }

    /// (sequence, repetition) of every GetSplit attempt, failed ones included.
    pub(crate) fn split_requests(&self) -> Vec<(u64, u64)> {
        self.shared.state().split_requests.clone()
    }

    /// The `max_splits` of every GetSplit request so far, in order.
    pub(crate) fn split_asks(&self) -> Vec<u32> {
        self.shared.state().split_asks.clone()
    }

    /// Tasks reported finished so far.
    pub(crate) fn finished(&self) -> BTreeSet<u64> {
        self.shared.finished.borrow().clone()
    }

    pub(crate) async fn wait_finished(&self, task_id: u64) {
        let mut rx = self.shared.finished.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|f| f.contains(&task_id)))
            .await
            .expect("task reported finished in time")
            .expect("mock alive");
    }

    pub(crate) async fn wait_registrations(&self, n: u32) {
        let mut rx = self.shared.registrations.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|r| *r >= n))
            .await
            .expect("worker registered in time")
            .expect("mock alive");
    }

    /// Waits until `n` more heartbeats than now have arrived.
    pub(crate) async fn wait_heartbeats(&self, n: u64) {
        let mut rx = self.shared.heartbeats.subscribe();
        let target = *rx.borrow() + n;
        tokio::time::timeout(WAIT, rx.wait_for(|h| *h >= target))
            .await
            .expect("heartbeats arrived in time")
            .expect("mock alive");
    }

    pub(crate) async fn wait_split_requests(&self, n: usize) {
        let mut rx = self.shared.split_attempts.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|a| *a >= n))
            .await
            .expect("GetSplit requests arrived in time")
            .expect("mock alive");
    }

    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("mock dispatcher task");
        }
    }
}

impl Drop for MockDispatcher {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Service(Arc<Shared>);

#[tonic::async_trait]
impl Dispatcher for Service {
    async fn register_dataset(
        &self,
        _: Request<pb::RegisterDatasetRequest>,
    ) -> Result<Response<pb::RegisterDatasetResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn get_dataset(
        &self,
        _: Request<pb::GetDatasetRequest>,
    ) -> Result<Response<pb::GetDatasetResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn get_or_create_job(
        &self,
        _: Request<pb::GetOrCreateJobRequest>,
    ) -> Result<Response<pb::GetOrCreateJobResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn get_or_create_iteration(
        &self,
        _: Request<pb::GetOrCreateIterationRequest>,
    ) -> Result<Response<pb::GetOrCreateIterationResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn release_iteration_client(
        &self,
        _: Request<pb::ReleaseIterationClientRequest>,
    ) -> Result<Response<pb::ReleaseIterationClientResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn client_heartbeat(
        &self,
        _: Request<pb::ClientHeartbeatRequest>,
    ) -> Result<Response<pb::ClientHeartbeatResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn get_status(
        &self,
        _: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }
    async fn maybe_remove_task(
        &self,
        _: Request<pb::MaybeRemoveTaskRequest>,
    ) -> Result<Response<pb::MaybeRemoveTaskResponse>, Status> {
        Err(Status::unimplemented("mock"))
    }

    async fn register_worker(
        &self,
        _: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let finished = self.0.finished.borrow().clone();
        let tasks = self
            .0
            .state()
            .tasks
            .iter()
            .filter(|t| !finished.contains(&t.task_id))
            .cloned()
            .collect();
        self.0.registrations.send_modify(|r| *r += 1);
        Ok(Response::new(pb::RegisterWorkerResponse { tasks }))
    }

    async fn worker_heartbeat(
        &self,
        request: Request<pb::WorkerHeartbeatRequest>,
    ) -> Result<Response<pb::WorkerHeartbeatResponse>, Status> {
        let req = request.into_inner();
        let resp = {
            let mut state = self.0.state();
            if std::mem::take(&mut state.forget_worker) {
                drop(state);
                self.0.heartbeats.send_modify(|h| *h += 1);
                return Err(Status::not_found("mock: unknown worker"));
            }
            if !req.finished_tasks.is_empty() && state.refuse_finish_reports > 0 {
                state.refuse_finish_reports -= 1;
                drop(state);
                self.0.heartbeats.send_modify(|h| *h += 1);
                return Err(Status::unavailable("mock: refusing a finish report"));
            }
            self.0.finished.send_modify(|f| f.extend(req.finished_tasks.iter().copied()));
            let finished = self.0.finished.borrow().clone();
            let new_tasks = state
                .tasks
                .iter()
                .filter(|t| {
                    !finished.contains(&t.task_id) && !req.current_tasks.contains(&t.task_id)
                })
                .filter(|t| !state.to_delete.contains(&t.task_id))
                .cloned()
                .collect();
            let tasks_to_delete =
                req.current_tasks.iter().copied().filter(|t| state.to_delete.contains(t)).collect();
            pb::WorkerHeartbeatResponse { new_tasks, tasks_to_delete, ..Default::default() }
        };
        self.0.heartbeats.send_modify(|h| *h += 1);
        Ok(Response::new(resp))
    }

    async fn get_split(
        &self,
        request: Request<pb::GetSplitRequest>,
    ) -> Result<Response<pb::GetSplitResponse>, Status> {
        let req = request.into_inner();
        self.0.split_attempts.send_modify(|a| *a += 1);
        let mut state = self.0.state();
        state.split_requests.push((req.sequence, req.repetition));
        state.split_asks.push(req.max_splits);
        if state.fail_get_split > 0 {
            state.fail_get_split -= 1;
            return Err(Status::unavailable("mock: injected failure"));
        }
        if state.refuse_get_split {
            return Err(Status::failed_precondition("mock: no splits for you"));
        }
        let key = (req.task_id, req.worker_uid, req.sequence);
        if let Some(resp) = state.answered.get(&key) {
            return Ok(Response::new(resp.clone()));
        }
        if state.waits > 0 {
            state.waits -= 1;
            let resp = pb::GetSplitResponse { wait: true, ..Default::default() };
            state.answered.insert(key, resp.clone());
            return Ok(Response::new(resp));
        }
        let resp = match state.splits.get(state.next_split).copied() {
            Some((begin, end)) if req.repetition == 0 => {
                let skip_runs = state.skip_runs.get(&state.next_split).cloned().unwrap_or_default();
                state.next_split += 1;
                pb::GetSplitResponse {
                    split: Some(pb::Split { begin, end, skip_runs, ..Default::default() }),
                    end_of_splits: false,
                    wait: false,
                }
            }
            _ => pb::GetSplitResponse { split: None, end_of_splits: true, ..Default::default() },
        };
        state.answered.insert(key, resp.clone());
        Ok(Response::new(resp))
    }
}
