//! The Dispatcher gRPC service: checks a request, turns it into one [`Command`],
//! proposes it to the [`Core`], and renders the answer.
//!
//! Soft state (not replicated, rebuilt after a restart): the liveness timers
//! (`liveness.rs`), fed by the heartbeat handlers here; the leader turns silence
//! into replicated commands; which worker token each worker registered with
//! (`worker_identity.rs`); what heartbeats report (`worker_reports.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sluice_dataset::io::{DataRoots, ListBudget};
use sluice_dataset::{DatasetDef, DatasetError, FunctionRegistry, Stage};
use sluice_proto::v1 as pb;
use sluice_security::Caller;
use tonic::{Request, Response, Status};
use tracing::{info, instrument};

use crate::client_view;
use crate::command::{Command, Response as R};
use crate::config::DispatcherConfig;
use crate::convert::*;
use crate::coordinated_reads::CoordinatedReads;
use crate::core::Core;
use crate::drained::DrainedConsumers;
use crate::eo_wire::*;
use crate::error::StateError;
use crate::liveness::Liveness;
use crate::quotas::Charge;
use crate::state::{DatasetId, SplitAnswer, State};
use crate::worker_identity::WorkerIdentities;
use crate::worker_reports::WorkerReports;
use crate::{python_check, worker_view};

/// How long `GetStatus` waits for a leader to confirm itself before answering
/// with its local (possibly stale) view.
const STATUS_LEADER_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

pub struct DispatcherService {
    core: Arc<Core>,
    config: DispatcherConfig,
    /// The functions this dispatcher's binary knows; workers may add more.
    registry: FunctionRegistry,
    /// Soft state: heartbeat times and the leader's timers.
    liveness: Arc<Liveness>,
    /// Coordinated reads: pause reports and removal votes (soft state).
    coordinated: CoordinatedReads,
    /// Worker address and uid → the token name they registered with (soft state).
    identities: WorkerIdentities,
    /// What workers' heartbeats reported (soft state).
    reports: Arc<WorkerReports>,
    /// Exactly-once consumers that hold nothing (soft state, for the sweep).
    drained: DrainedConsumers,
    /// Each iteration's view digest at a views generation (soft state).
    view_digests: client_view::ViewDigests,
    worker_digests: worker_view::WorkerDigests,
    /// This node's client port is off loopback without tokens (`--insecure`):
    /// anyone who reaches it could make workers run code, so pipelines with
    /// Python stages are refused.
    anonymous_off_loopback: bool,
}

impl DispatcherService {
    pub(crate) fn new(
        core: Arc<Core>,
        config: DispatcherConfig,
        registry: FunctionRegistry,
        liveness: Arc<Liveness>,
        reports: Arc<WorkerReports>,
    ) -> Self {
        let coordinated = CoordinatedReads::new(core.clone());
        let identities = WorkerIdentities::default();
        DispatcherService {
            core,
            config,
            registry,
            liveness,
            coordinated,
            identities,
            reports,
            drained: DrainedConsumers::default(),
            view_digests: client_view::ViewDigests::default(),
            worker_digests: worker_view::WorkerDigests::default(),
            anonymous_off_loopback: false,
        }
    }

    /// Whether this node serves unauthenticated clients off loopback (then it
    /// refuses pipelines with Python stages).
    pub(crate) fn serving_anonymous_off_loopback(mut self, yes: bool) -> Self {
        self.anonymous_off_loopback = yes;
        self
    }

    /// Python stages are user code the workers run: only an authenticated client
    /// may register them where the dispatcher is reachable from a network.
    fn check_user_code_origin(&self, def: &sluice_dataset::DatasetDef) -> Result<(), Status> {
        match python_check::anonymous_user_code(def, self.anonymous_off_loopback) {
            Some(refusal) => Err(Status::failed_precondition(refusal)),
            None => Ok(()),
        }
    }

    /// A job whose pipeline has Python stages that no registered worker can run is
    /// refused, naming the stage and what each worker runs, rather than created to
    /// wait for a worker that may never come. Read on the leader; not replicated
    /// (workers come and go: the next request is checked again).
    async fn check_python_workers(&self, dataset_id: &str) -> Result<(), Status> {
        let refusal = self
            .core
            .read_leader(|s| {
                let def = &s.datasets.get(dataset_id)?.def;
                python_check::refusal(def, s.workers.values())
            })
            .await?;
        match refusal {
            Some(why) => Err(Status::failed_precondition(format!(
                "cannot run a job over dataset `{dataset_id}`: {why}"
            ))),
            None => Ok(()),
        }
    }

    fn unexpected(cmd: &str, r: R) -> Status {
        Status::internal(format!("{cmd}: unexpected state machine answer {r:?}"))
    }

    /// Every function the pipeline calls must be known: to this dispatcher's
    /// registry (which also checks the argument count) or advertised by a worker.
    async fn check_functions(&self, def: &sluice_dataset::DatasetDef) -> Result<(), Status> {
        let advertised: BTreeSet<String> = self
            .core
            .read_leader(|s| s.workers.values().flat_map(|w| w.functions.iter().cloned()).collect())
            .await?;
        for (i, kind, call) in &def.function_calls() {
            let (i, kind) = (*i, *kind);
            if self.registry.has(kind, &call.name) {
                self.registry.check_call(kind, call).map_err(|e| {
                    Status::invalid_argument(format!("stages[{i}].{}: {e}", kind.name()))
                })?;
                continue;
            }
            let qualified = format!("{}:{}", kind.name(), call.name);
            if advertised.contains(&qualified) {
                continue;
            }
            let mut known: BTreeSet<String> = self.registry.names().into_iter().collect();
            known.extend(advertised.iter().cloned());
            let known: Vec<String> = known
                .into_iter()
                .filter_map(|n| n.strip_prefix(&format!("{}:", kind.name())).map(String::from))
                .collect();
            let e = DatasetError::UnknownFunction {
                kind: kind.name().to_string(),
                name: call.name.clone(),
                known: known.join(", "),
            };
            return Err(Status::invalid_argument(format!("stages[{i}]: {e}")));
        }
        Ok(())
    }

    /// A consumer's long poll waits at most `max_client_wait` and a quarter of the
    /// client timeout, so a waiting consumer is never late.
    fn max_poll_wait(&self) -> Duration {
        self.poll_cap(self.config.client_timeout)
    }

    /// The same for a worker's held heartbeat and the worker timeout (a held
    /// heartbeat feeds the liveness timer only when it is read).
    fn max_worker_wait(&self) -> Duration {
        self.poll_cap(self.config.worker_timeout)
    }

    /// `max_client_wait`, and at most a quarter of `timeout` (0: no timeout).
    fn poll_cap(&self, timeout: Duration) -> Duration {
        match timeout {
            t if t.is_zero() => self.config.max_client_wait,
            t => (t / 4).min(self.config.max_client_wait),
        }
    }

    /// `cmd`, which may create something, charged to its caller's identity
    /// (`quotas.rs`): `None` on a dispatcher without tokens. `bytes`: a
    /// dataset definition's size, else 0.
    fn charged(&self, caller: Option<&Caller>, bytes: u64, cmd: Command) -> Command {
        let owner = caller.map(|c| c.name.to_string());
        let charge = Charge { owner, bytes, quotas: self.config.quotas };
        Command::Charged { charge, command: Box::new(cmd) }
    }

    fn task_defs(state: &State, address: &str) -> Vec<pb::TaskDef> {
        state.worker_tasks(address).into_iter().filter_map(|t| task_def(state, t)).collect()
    }
}

#[tonic::async_trait]
impl pb::dispatcher_server::Dispatcher for DispatcherService {
    #[instrument(skip_all, fields(dataset_id = %req.get_ref().dataset_id))]
    async fn register_dataset(
        &self,
        req: Request<pb::RegisterDatasetRequest>,
    ) -> Result<Response<pb::RegisterDatasetResponse>, Status> {
        let caller = req.extensions().get::<Caller>().cloned();
        let req = req.into_inner();
        let def = def_from_wire(req.dataset)?;
        self.check_user_code_origin(&def)?;
        self.check_functions(&def).await?;
        // `list_files` is listed once, here, so the file list (and with it the
        // split order and every static shard) is part of the replicated state.
        // Every file it names must lie under the data roots (checked again, per
        // file, by the worker that opens it).
        let def = resolve_files(def, self.registry.data_roots().clone()).await?;
        let dataset_id: Option<DatasetId> = Some(req.dataset_id).filter(|id| !id.is_empty());
        // What the definition weighs as held: after `list_files` was listed.
        let bytes = prost::Message::encoded_len(&pb::DatasetDef::from(&def)) as u64;
        let cmd = Command::RegisterDataset { dataset_id, def, limits: self.config.limits };
        match self.core.propose(self.charged(caller.as_ref(), bytes, cmd)).await? {
            R::DatasetRegistered { dataset_id } => {
                info!(%dataset_id, "dataset registered");
                Ok(Response::new(pb::RegisterDatasetResponse { dataset_id }))
            }
            r => Err(Self::unexpected("RegisterDataset", r)),
        }
    }

    async fn get_dataset(
        &self,
        req: Request<pb::GetDatasetRequest>,
    ) -> Result<Response<pb::GetDatasetResponse>, Status> {
        let id = req.into_inner().dataset_id;
        let found = self
            .core
            .read_leader(|s| {
                s.datasets.get(&id).map(|d| pb::GetDatasetResponse {
                    dataset: Some(pb::DatasetDef::from(&d.def)),
                    source_cardinality: d.source_cardinality,
                })
            })
            .await?;
        found.map(Response::new).ok_or_else(|| {
            StateError::not_found_hint(
                "dataset",
                id,
                "; register it first (sluice register, or Client::register_dataset)",
            )
            .into()
        })
    }

    #[instrument(skip_all, fields(dataset_id = %req.get_ref().dataset_id, job_name = %req.get_ref().job_name))]
    async fn get_or_create_job(
        &self,
        req: Request<pb::GetOrCreateJobRequest>,
    ) -> Result<Response<pb::GetOrCreateJobResponse>, Status> {
        let caller = req.extensions().get::<Caller>().cloned();
        let req = req.into_inner();
        let mode = mode_from_wire(req.mode)?;
        let target_workers = target_workers_from_wire(req.target_workers)?;
        self.check_python_workers(&req.dataset_id).await?;
        // Stamped here so the job keeps the list it was created with.
        let static_workers = self.config.worker_addresses.clone();
        // The replayability check, stamped into the command (apply stays pure);
        // read on the leader with the dataset's definition.
        let (checks, existing_at_most_once) = self
            .core
            .read_leader(|s| {
                let checks = s
                    .datasets
                    .get(&req.dataset_id)
                    .map(|d| (d.def.exactly_once(), d.def.deterministic_order()));
                let existing = s.jobs_by_name.get(&req.job_name);
                (checks, existing.is_some_and(|id| !s.exactly_once.is_exactly_once(*id)))
            })
            .await?;
        let (replay, ordered) = checks.unwrap_or_else(|| {
            let missing = || Err("the dataset is not registered".to_string());
            (missing(), Ok(()))
        });
        let limits = self.config.limits;
        let cmd = job_command(
            &req,
            mode,
            target_workers,
            static_workers,
            replay.clone(),
            ordered,
            limits,
            existing_at_most_once,
        )?;
        match self.core.propose(self.charged(caller.as_ref(), 0, cmd)).await? {
            R::Job { job_id, job_name, exactly_once } => {
                let at_most_once_reason = if exactly_once {
                    String::new()
                } else {
                    let named = Some(job_name.as_str()).filter(|_| existing_at_most_once);
                    at_most_once_reason(
                        mode,
                        req.use_cross_trainer_cache,
                        req.num_consumers,
                        replay,
                        named,
                    )
                };
                Ok(Response::new(pb::GetOrCreateJobResponse {
                    job_id,
                    job_name,
                    delivery: delivery_to_wire(exactly_once) as i32,
                    at_most_once_reason,
                }))
            }
            r => Err(Self::unexpected("GetOrCreateJob", r)),
        }
    }

    #[instrument(skip_all, fields(job_id = req.get_ref().job_id))]
    async fn get_or_create_iteration(
        &self,
        req: Request<pb::GetOrCreateIterationRequest>,
    ) -> Result<Response<pb::GetOrCreateIterationResponse>, Status> {
        let caller = req.extensions().get::<Caller>().cloned();
        let req = req.into_inner();
        let cmd = iteration_command(&req, self.config.elements_per_split, self.config.limits)?;
        match self.core.propose(self.charged(caller.as_ref(), 0, cmd)).await? {
            R::Iteration { iteration_id, client_id } => {
                self.liveness.client_seen(client_id);
                info!(
                    iteration_id,
                    client_id,
                    restored = req.restore.is_some(),
                    "client joined iteration"
                );
                let exactly_once =
                    self.core.read_local(|s| s.exactly_once.iterations.contains_key(&iteration_id));
                Ok(Response::new(pb::GetOrCreateIterationResponse {
                    iteration_id,
                    client_id,
                    delivery: delivery_to_wire(exactly_once) as i32,
                }))
            }
            r => Err(Self::unexpected("GetOrCreateIteration", r)),
        }
    }

    #[instrument(level = "debug", skip_all, fields(client_id = req.get_ref().client_id))]
    async fn release_iteration_client(
        &self,
        req: Request<pb::ReleaseIterationClientRequest>,
    ) -> Result<Response<pb::ReleaseIterationClientResponse>, Status> {
        let client_id = req.into_inner().client_id;
        self.drained.forget(client_id);
        self.core.propose(Command::ReleaseClient { client_id }).await?;
        Ok(Response::new(pb::ReleaseIterationClientResponse {}))
    }

    #[instrument(level = "debug", skip_all, fields(
        client_id = req.get_ref().client_id,
        consumer_index = req.get_ref().consumer_index,
    ))]
    async fn client_heartbeat(
        &self,
        req: Request<pb::ClientHeartbeatRequest>,
    ) -> Result<Response<pb::ClientHeartbeatResponse>, Status> {
        let req = req.into_inner();
        if req.consumer_index.is_some() {
            return Ok(Response::new(self.coordinated.client_heartbeat(req).await?));
        }
        let client_id = req.client_id;
        // A consumed report is applied before the long poll, whether or not the
        // view then changes; the answer carries the checkpoint watermark after it.
        if let Some(report) = req.consumed.as_ref().filter(|r| report_matters(r)) {
            // A report with nothing but a generation already recorded is not
            // worth a log entry (an idle consumer heartbeats often).
            let known = report_is_only_known_generation(report)
                && self
                    .core
                    .read_local(|s| client_generation(s, client_id) >= Some(report.generation));
            if !known {
                self.core.propose(report_command(client_id, report)?).await?;
            }
        }
        if let Some(report) = &req.consumed {
            self.drained.note(client_id, report);
            if report.drained_tasks > 0 {
                let sweep = self.core.read_local(|s| self.drained.sweep_for(s, client_id));
                if let Some(cmd) = sweep {
                    self.core.propose(cmd).await?;
                }
            }
        }
        // A long poll answers at a change or after the wait, which is a fraction of
        // the client timeout; the timer is fed at every read of the view.
        let wait = Duration::from_millis(req.wait_for_change_ms.into()).min(self.max_poll_wait());
        let seen = || self.liveness.client_seen(client_id);
        let ask = client_view::Ask {
            client_id,
            known_view: req.known_view,
            omit_unchanged_tasks: req.omit_unchanged_tasks,
        };
        let resp = client_view::long_poll(&self.core, ask, &self.view_digests, wait, seen).await?;
        resp.map(Response::new).ok_or_else(|| {
            StateError::not_found_hint(
                "iteration client",
                client_id.to_string(),
                "; it was released, its iteration finished and was collected after the \
                 finished-job TTL (--finished-job-ttl-secs), or the dispatcher restarted \
                 without a work_dir (in-memory state is lost on restart)",
            )
            .into()
        })
    }

    #[instrument(skip_all, fields(worker = %req.get_ref().address))]
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let caller = req.extensions().get::<Caller>().cloned();
        let req = req.into_inner();
        let (address, worker_uid) = (req.address.clone(), req.worker_uid);
        // Readers dial this address with their token: checked here, before it is
        // proposed (the state machine stays as it was, so old journals replay
        // unchanged), by the one address parser, with a scheme only if it matches
        // the cluster's TLS (issue 31: `http://` made TLS readers send tokens in
        // clear, an unparsable one failed every read).
        let tls = self.config.security.tls.as_ref().is_some_and(|t| t.has_identity());
        if let Err(e) = sluice_security::ServerAddress::parse_for(&address, tls) {
            return Err(Status::invalid_argument(format!(
                "RegisterWorker: the worker's address is not one readers can dial: {e}; \
                 start the worker with --advertise HOST:PORT"
            )));
        }
        self.identities.register(caller.as_ref(), &address, worker_uid)?;
        let allowed = &self.config.worker_addresses;
        if !allowed.is_empty() && !allowed.contains(&address) {
            // FailedPrecondition: the worker gives up (and exits) instead of retrying.
            return Err(Status::failed_precondition(format!(
                "worker address {address} is not in the dispatcher's worker_addresses \
                 [{}]; start the worker with one of these addresses or add it to \
                 --worker-addresses on every dispatcher",
                allowed.join(", ")
            )));
        }
        let cmd = Command::RegisterWorker {
            address: req.address,
            worker_uid: req.worker_uid,
            functions: req.functions,
            python_version: Some(req.python_version).filter(|v| !v.is_empty()),
            limits: self.config.limits,
        };
        match self.core.propose(cmd).await? {
            R::WorkerRegistered { tasks } => {
                info!(tasks = tasks.len(), "worker registered");
                self.liveness.worker_seen(&address, worker_uid);
                let tasks = self.core.read_leader(|s| Self::task_defs(s, &address)).await?;
                Ok(Response::new(pb::RegisterWorkerResponse { tasks }))
            }
            r => Err(Self::unexpected("RegisterWorker", r)),
        }
    }

    #[instrument(level = "debug", skip_all, fields(worker = %req.get_ref().address))]
    async fn worker_heartbeat(
        &self,
        req: Request<pb::WorkerHeartbeatRequest>,
    ) -> Result<Response<pb::WorkerHeartbeatResponse>, Status> {
        let caller = req.extensions().get::<Caller>().cloned();
        let mut req = req.into_inner();
        let (address, worker_uid) = (std::mem::take(&mut req.address), req.worker_uid);
        self.identities.check_address(caller.as_ref(), &address)?;
        // A worker declared lost is unknown until it registers again; a request
        // from another process than the registered one is refused (naming both
        // uids) before it feeds the liveness timer or reports anything.
        let known = |s: &State| match s.registered_worker(&address, worker_uid) {
            Ok(w) if w.lost => Ok(false),
            Ok(_) => Ok(true),
            Err(StateError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        };
        let unknown = |address: String| -> Status {
            StateError::not_found_hint(
                "worker",
                address,
                "; register it again (the dispatcher may have restarted, or declared the \
                 worker lost after its worker timeout)",
            )
            .into()
        };
        if !req.finished_tasks.is_empty() {
            if !self.core.read_leader(known).await?? {
                return Err(unknown(address));
            }
            let cmd = Command::FinishTasks {
                worker_address: address.clone(),
                worker_uid,
                task_ids: std::mem::take(&mut req.finished_tasks),
            };
            if let R::TasksFinished { finished_iterations } = self.core.propose(cmd).await? {
                for iteration_id in finished_iterations {
                    info!(iteration_id, "iteration finished");
                }
            }
        }
        self.reports.record(&address, req.errors_ignored);
        let running = worker_view::Running::of(&mut req);
        let wait = Duration::from_millis(req.wait_for_change_ms.into()).min(self.max_worker_wait());
        let seen = || self.liveness.worker_seen(&address, worker_uid);
        // Without reports, the check that the worker is known is part of the
        // poll's reads (one leader read per heartbeat, not two).
        let worker = worker_view::Asking { address: &address, running: &running };
        let digests = &self.worker_digests;
        let poll = worker_view::long_poll(&self.core, worker, digests, wait, known, seen);
        match poll.await? {
            Ok(resp) => Ok(Response::new(resp)),
            Err(None) => Err(unknown(address)),
            Err(Some(e)) => Err(e.into()),
        }
    }

    #[instrument(level = "debug", skip_all, fields(
        task_id = req.get_ref().task_id,
        worker_uid = req.get_ref().worker_uid,
        sequence = req.get_ref().sequence,
        split_provider = req.get_ref().split_provider_index,
    ))]
    async fn get_split(
        &self,
        req: Request<pb::GetSplitRequest>,
    ) -> Result<Response<pb::GetSplitResponse>, Status> {
        self.core.counters().get_split_request();
        let caller = req.extensions().get::<Caller>().cloned();
        let r = req.into_inner();
        self.identities.check_uid(caller.as_ref(), r.worker_uid)?;
        let cmd = Command::GetSplit {
            task_id: r.task_id,
            worker_uid: r.worker_uid,
            sequence: r.sequence,
            provider: r.split_provider_index,
            repetition: r.repetition,
            max_splits: r.max_splits,
        };
        match self.core.propose(cmd).await? {
            R::Split(answer) => {
                if let SplitAnswer::Split { begin, end } = answer {
                    self.core.counters().split_granted(begin, end);
                }
                Ok(Response::new(split_to_wire(answer, vec![], None)))
            }
            R::SplitSkipping { answer, skip_runs } => {
                if let SplitAnswer::Split { begin, end } = answer {
                    self.core.counters().split_granted(begin, end);
                }
                Ok(Response::new(split_to_wire(answer, skip_runs, None)))
            }
            R::OrderedSplit { answer, skip_runs, place } => {
                if let SplitAnswer::Split { begin, end } = answer {
                    self.core.counters().split_granted(begin, end);
                }
                Ok(Response::new(split_to_wire(answer, skip_runs, Some(place))))
            }
            r => Err(Self::unexpected("GetSplit", r)),
        }
    }

    async fn maybe_remove_task(
        &self,
        req: Request<pb::MaybeRemoveTaskRequest>,
    ) -> Result<Response<pb::MaybeRemoveTaskResponse>, Status> {
        Ok(Response::new(self.coordinated.maybe_remove_task(req.into_inner()).await?))
    }

    async fn get_status(
        &self,
        _req: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let heartbeats = self.liveness.heartbeats();
        let ignored = self.reports.errors_ignored();
        // The leader answers with everything committed applied (a new leader
        // re-applies the log after its first commit); a follower answers with what
        // it has, flagged as not from the leader.
        let render = |s: &State| crate::status::render(s, &heartbeats, &ignored);
        // Bounded: a leader cut off from its quorum cannot confirm itself.
        let confirmed = tokio::time::timeout(STATUS_LEADER_CHECK, self.core.read_leader(render));
        let (mut status, from_leader) = match confirmed.await {
            Ok(Ok(status)) => (status, true),
            _ => (self.core.read_local(render), false),
        };
        status.raft = Some(self.core.raft_status());
        status.from_leader = from_leader;
        Ok(Response::new(status))
    }
}

/// Checks the files `def` names against `roots` and lists the files of its
/// `list_files` stages (each match checked too), off the runtime's threads (it may
/// block on a file system or object store).
async fn resolve_files(mut def: DatasetDef, roots: DataRoots) -> Result<DatasetDef, Status> {
    if roots.is_unrestricted() && !def.has_unresolved_files() {
        return Ok(def);
    }
    let checked = {
        let roots = roots.clone();
        tokio::task::spawn_blocking(move || def.check_files(&roots).map(|()| def))
    };
    def = checked
        .await
        .map_err(|e| Status::internal(format!("checking files: {e}")))?
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    if !def.has_unresolved_files() {
        return Ok(def);
    }
    let patterns: Vec<String> = def
        .stages
        .iter()
        .filter_map(|s| match s {
            Stage::ListFiles { pattern, files: None, .. } => Some(pattern.clone()),
            _ => None,
        })
        .collect();
    // Bounded in depth, entries and time (`sluice_dataset::io::ListBudget`), and
    // cancelled when this request is dropped (the caller gave up or went away).
    let budget = ListBudget::default();
    let _cancel_on_drop = CancelOnDrop(budget.clone());
    let resolved = tokio::task::spawn_blocking(move || {
        def.resolve_files_within(&roots, &budget).map(|()| def)
    })
    .await
    .map_err(|e| Status::internal(format!("listing files: {e}")))?;
    resolved.map_err(|e| {
        let msg = e.to_string();
        if patterns.is_empty() || patterns.iter().any(|p| msg.contains(p.as_str())) {
            Status::invalid_argument(msg)
        } else {
            Status::invalid_argument(format!("list_files `{}`: {msg}", patterns.join("`, `")))
        }
    })
}

/// Cancels a listing's budget when the request that started it ends.
struct CancelOnDrop(ListBudget);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
