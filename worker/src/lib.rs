//! Sluice's worker: registers with the dispatcher, runs the pipelines of the tasks
//! it is given, and streams their elements to clients.
//!
//! # Layout
//! - [`config`]: [`WorkerConfig`] and its checks.
//! - `state`: the task table shared by the service and the control loop.
//! - `heartbeat`: the control loop — register, heartbeat (a long poll), start and
//!   delete tasks, report finished ones.
//! - `task`: one task — composes its `buffer`, the `runner` filling it, and what a
//!   job puts in front of the buffer (a `cache` or `coordinated` rounds).
//! - `buffer`: a task's bounded buffer as its readers see it — the next batch, one
//!   element, the message bounds, why the task stopped. A leaf but for
//!   `user_error`: a pipeline's failure as the status that ends a read (its code
//!   the kind: `DataLoss`, `NotFound`, ...; a user function's with its reason,
//!   failure as JSON details, bounded to fit HTTP/2 trailers).
//! - `runner`: the pipeline thread — builds the task's pipeline (a static mode's
//!   shard) and fills the buffer; a DYNAMIC source takes its splits from `splits`.
//! - `splits`: the DYNAMIC source's split provider, backed by `GetSplit`; its
//!   `size` (pure) picks each grant's size and whether to ask ahead.
//! - `coordinated`: coordinated reads — a coordinated task serves rounds: all
//!   `num_consumers` consumers ask, consumer i gets element i, or all skip.
//! - `ordered`: a deterministic-order task's router — each split's elements to
//!   the bounded queue of its consumer (`GetElements.consumer_index`); the
//!   split provider records each grant's place in its `Grants`.
//! - `cache`: a task's cross-trainer cache — a byte-bounded sliding window every
//!   trainer reads at its own cursor, extended from the task's buffer.
//! - `service`: the `Worker` gRPC service (`GetElements`, `CoordinatedGetElement`,
//!   `CacheStatus`); it looks every request's task up in the table, answers for a
//!   task that is not running, opens a GetElements stream and spawns its
//!   `producer`, which feeds a bounded channel.
//! - `compress`: a stream's compression — the producer compresses a message's
//!   elements when the client asked for it and it pays (docs/operations-compression.md).
//! - `route`: the Worker service as served — `GetElements` answered over plain
//!   HTTP/2 with the `scatter` encoding (tensor data sent without a copy), every
//!   other method by the generated tonic server.
//! - `drain`: leaving cleanly — drain on shutdown, exit when idle.
//! - `health`: the standard gRPC health service's status (SERVING while
//!   registered and not draining; docs/operations.md).
//! - `counters` (a leaf) and `metrics`: Prometheus counters (elements and bytes
//!   streamed, streams) and gauges read from the task table at scrape time, served
//!   at `GET /metrics` ([`run_with_metrics`]).
//! - `access`: [`WorkerSecurity`] — TLS of the port, the client-token guard
//!   in front of every route, and what the worker presents to the dispatcher.
//! - [`error`]: [`WorkerError`], what stops a worker.
//! - `fuzzing` (feature `fuzzing`): the route's request reader as an entry point for the
//!   fuzz target in `fuzz/` and the corpus-replay test (`tests/fuzz_corpus.rs`).
//!
//! Modules depend one way only (`scripts/module-cycles.py` checks it): `task`
//! on `buffer`, `runner`, `cache`, `coordinated` and `ordered`, those on
//! `buffer` (and `runner`, `splits` on `ordered`), never on `task`; `metrics`
//! reads `state`, which holds the `counters`.
//!
//! ```text
//!  dispatcher ◀─ RegisterWorker / WorkerHeartbeat ── heartbeat ──▶ state (task table)
//!      ▲                                                              │ start / delete
//!      └── GetSplit ◀── splits ◀── runner (pipeline thread) ◀── task ◀┘
//!                                     │ bounded mpsc
//!                                     ▼
//!                                   buffer ─┬─────────────────────▶ producer ──▶ route
//!                                           ├─▶ cache (per trainer) ─┘  (FCFS)     │
//!                                           └─▶ coordinated rounds ─▶ service      │
//!                                                                        │         │
//!  client ◀── CoordinatedGetElement ─────────────────────────────────────┘         │
//!  client ◀── ElementBatch stream (scatter: tensor data not copied) ───────────────┘
//! ```
//! The service looks every request's task up in `state` before anything reads it.
//!
//! # Soft state
//! The worker is stateless: nothing it holds survives a restart, and nothing needs
//! to. A restarted process at the same address picks a new `worker_uid`, registers,
//! and the dispatcher hands back its unfinished tasks, which start again from the
//! beginning (OFF, and a static mode's shard, as in tf.data) or take new splits
//! (DYNAMIC). Clients retry `Unavailable` until the task is known again.

mod access;
mod buffer;
mod cache;
mod compress;
pub mod config;
mod coordinated;
mod counters;
mod credit;
mod drain;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod heartbeat;
mod metrics;
mod ordered;
mod producer;
mod route;
mod runner;
mod scatter;
mod service;
mod splits;
mod state;
mod task;
mod user_error;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_client::DispatcherClient;
use sluice_dataset::FunctionRegistry;
use sluice_proto::v1::worker_server::WorkerServer;
use sluice_proto::MAX_MESSAGE_BYTES;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tracing::Instrument;

pub use access::WorkerSecurity;
pub use config::{WorkerConfig, DEFAULT_CROSS_TRAINER_CACHE_BYTES};
pub use error::WorkerError;

use crate::route::WorkerRoutes;
use crate::service::WorkerService;
use crate::state::Worker;

/// The worker port's own service, as gRPC reflection advertises it.
const WORKER_SERVICE: &str = <WorkerRoutes as tonic::server::NamedService>::NAME;

/// HTTP/2 windows large enough that a stream of big batches is not throttled by
/// flow control on a fast link.
const STREAM_WINDOW_BYTES: u32 = 4 * 1024 * 1024;
const CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;

/// After shutdown, how long open connections get to drain before `run` returns
/// anyway (a client that stopped reading would otherwise hold it forever).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves until `shutdown` resolves: the Worker service starts on `listener` at
/// once, registration (retried until it succeeds or the worker stops) and
/// heartbeats run in the background, and tasks run as the dispatcher assigns them.
/// Returns [`WorkerError::Refused`] if the dispatcher refuses the worker for good
/// (its address is not in the dispatcher's `worker_addresses`).
pub async fn run(
    listener: TcpListener,
    config: WorkerConfig,
    registry: FunctionRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    run_with_metrics(listener, None, config, registry, shutdown).await
}

/// [`run`], also serving Prometheus metrics at `GET /metrics` on `metrics` (if
/// given) for as long as the worker serves (see `metrics.rs`).
pub async fn run_with_metrics(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    config: WorkerConfig,
    registry: FunctionRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    run_with_health(listener, metrics, None, config, registry, shutdown).await
}

/// [`run_with_metrics`], also serving the gRPC health service alone, in plain
/// text, on `health` (`--health-addr`, for orchestrators' probes).
pub async fn run_with_health(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    health: Option<TcpListener>,
    config: WorkerConfig,
    registry: FunctionRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    config.validate()?;
    let address = advertised_address(&config, &listener)?;
    let host = listener.local_addr()?.ip().to_string();
    let security = &config.security;
    sluice_security::require_secure_off_loopback(
        "worker",
        &host,
        &security.missing(),
        security.insecure,
    )?;
    if registry.python().is_some() {
        sluice_security::require_auth_for_user_code(&host, security.tokens.is_some())?;
    }
    let data_roots = config.data_roots.clone().unwrap_or_else(|| {
        sluice_dataset::io::DataRoots::defaults(
            listener.local_addr().is_ok_and(|a| a.ip().is_loopback()),
        )
    });
    let registry = registry.with_data_roots(data_roots);
    let dispatcher = DispatcherClient::with_security(
        &config.dispatcher_addresses,
        config.dispatcher_retry.clone(),
        security.dispatcher_client()?,
    )?;
    // Tells this process from an earlier one at the same address (GetSplit keys).
    let worker_uid: u64 = rand::random();
    let span = tracing::info_span!("worker", worker = %address, worker_uid);
    span.in_scope(|| {
        tracing::info!(data_roots = %registry.data_roots(), "pipelines may open files only under these data roots");
        match registry.python() {
            Some(p) => tracing::info!(
                python = p.version(),
                processes = p.processes(),
                "runs pipelines' Python stages (--allow-python)"
            ),
            None => tracing::info!("runs no Python stage (no --allow-python)"),
        }
    });
    let worker = Arc::new(Worker::new(
        address,
        worker_uid,
        config,
        registry,
        dispatcher,
        tokio::runtime::Handle::current(),
    ));
    let _metrics = {
        let _entered = span.enter();
        match metrics {
            Some(l) => {
                let s = &worker.config.security;
                let access = sluice_metrics::Access::new(s.tls.as_ref(), s.tokens.clone())?;
                let registry = Arc::new(crate::metrics::registry(worker.clone()));
                Some(sluice_metrics::spawn_with_access(l, registry, access)?)
            }
            None => None,
        }
    };
    serve(worker, listener, health, shutdown).instrument(span).await
}

async fn serve(
    worker: Arc<Worker>,
    listener: TcpListener,
    health_port: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), WorkerError> {
    tracing::info!(dispatchers = ?worker.config.dispatcher_addresses, "worker serving");
    // Readers in this process find this worker for `TargetWorkers::Local` reads
    // until `serve` returns (or its future is dropped).
    let _local = sluice_client::local_workers::Registration::new(&worker.address);
    let control = tokio::spawn(heartbeat::run(worker.clone()).in_current_span());

    let generated = WorkerServer::new(WorkerService::new(worker.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let service = WorkerRoutes::new(worker.clone(), generated);
    let (reporter, health_service) = tonic_health::server::health_reporter();
    // tonic-health starts the server's status at SERVING: not ready before the
    // task below has looked (a probe could come first).
    reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
    let health = health::spawn(worker.clone(), reporter);
    // Ends with the worker: aborted below.
    let health_port = health_port.map(|l| {
        let plain = health_service.clone();
        let mut stopping = worker.shutdown_signal();
        tokio::spawn(
            async move {
                let stopped = async move {
                    let _ = stopping.wait_for(|stopping| *stopping).await;
                };
                if let Err(e) = sluice_security::health_port::serve(l, plain, stopped).await {
                    tracing::warn!(error = %e, "the plain health listener failed");
                }
            }
            .in_current_span(),
        )
    });
    // Stopping the tasks first ends their streams, which lets graceful shutdown finish.
    // The worker may also stop itself (the dispatcher refused it).
    let signal = {
        let worker = worker.clone();
        let mut stopping = worker.shutdown_signal();
        async move {
            let asked = tokio::select! {
                _ = shutdown => true,
                _ = stopping.wait_for(|stopping| *stopping) => false,
                _ = drain::idle(worker.clone()) => false,
            };
            if asked {
                tracing::info!("worker shutting down");
                drain::drain(&worker).await;
            }
            worker.shut_down();
        }
    };
    // `serve_with_incoming*` ignores the builder's tcp_nodelay and keepalive; the
    // incoming sets them, and bounds connections (`sluice_security::incoming`).
    let limits = worker.config.server;
    let incoming = sluice_security::Incoming::new(listener, &limits, "worker");
    let mut builder = limits.apply(Server::builder());
    if let Some(tls) = worker.config.security.server_tls()? {
        builder = builder.tls_config(limits.tls(tls))?;
    }
    let server = builder
        .layer(sluice_telemetry::RpcSpans::new("worker"))
        .layer(worker.config.security.guard())
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .add_service(health_service)
        .add_service(sluice_proto::reflection::v1(&[WORKER_SERVICE]))
        .add_service(sluice_proto::reflection::v1alpha(&[WORKER_SERVICE]))
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(server);
    let mut stopping = worker.shutdown_signal();
    let result = tokio::select! {
        result = &mut server => result,
        _ = async {
            let _ = stopping.wait_for(|stopping| *stopping).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "connections did not drain; leaving them");
            Ok(())
        }
    };
    // Also when the server failed on its own: stop tasks and the control loop.
    worker.shut_down();
    health.abort();
    if let Some(port) = health_port {
        port.abort();
    }
    if let Err(e) = control.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    tracing::info!("worker stopped");
    if let Some(reason) = worker.refusal() {
        return Err(WorkerError::Refused(reason));
    }
    result.map_err(WorkerError::from)
}

fn advertised_address(
    config: &WorkerConfig,
    listener: &TcpListener,
) -> Result<String, WorkerError> {
    match config.advertised()? {
        Some(address) => Ok(address),
        None => Ok(format!("127.0.0.1:{}", listener.local_addr()?.port())),
    }
}

/// A worker running on the current runtime. Dropping it stops the worker (without
/// waiting); [`WorkerHandle::shutdown`] stops it and waits.
pub struct WorkerHandle {
    address: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), WorkerError>>>,
    /// Becomes true when the worker has stopped (asked to, idle, or failed).
    done: watch::Receiver<bool>,
}

/// Starts a worker on `listener` in the background; for tests and `sluice local`.
pub async fn spawn(
    listener: TcpListener,
    config: WorkerConfig,
    registry: FunctionRegistry,
) -> Result<WorkerHandle, WorkerError> {
    // Checked here too so a bad config fails the caller, not a background task.
    config.validate()?;
    let address = advertised_address(&config, &listener)?;
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        // Err: the handle was dropped, which also means stop.
        let _ = stopped.await;
    };
    let (done_tx, done) = watch::channel(false);
    let task = tokio::spawn(async move {
        let result = run(listener, config, registry, shutdown).await;
        let _ = done_tx.send(true);
        result
    });
    Ok(WorkerHandle { address, stop: Some(stop), task: Some(task), done })
}

impl WorkerHandle {
    /// The address clients dial.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Resolves once the worker has stopped, by [`WorkerHandle::shutdown`], by
    /// `exit_when_idle`, or because it failed; does not stop it.
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut done = self.done.clone();
        async move {
            let _ = done.wait_for(|d| *d).await;
        }
    }

    /// Stops the worker and waits until it has stopped.
    pub async fn shutdown(mut self) -> Result<(), WorkerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // Cancelled: the runtime is going away, taking the worker with it.
                Err(_) => Ok(()),
            },
            None => Ok(()),
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
