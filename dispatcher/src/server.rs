//! Serving the Dispatcher service on a bound listener, and (in a group of several
//! nodes) the RaftPeer service on its own listener, with an injectable shutdown.
//! Each listener has its TLS and its guard (`access.rs`): a client or worker token
//! is never accepted on the Raft port, and Raft is not served on the client port.

use std::future::Future;
use std::sync::Arc;

use sluice_dataset::FunctionRegistry;
use sluice_proto::v1::dispatcher_server::DispatcherServer;
use sluice_proto::v1::raft_peer_server::RaftPeerServer;
use sluice_proto::MAX_MESSAGE_BYTES;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::{Server, ServerTlsConfig};

use crate::config::DispatcherConfig;
use crate::core::Core;
use crate::error::DispatcherError;
use crate::liveness::Liveness;
use crate::raft::peer_service::PeerService;
use crate::service::DispatcherService;
use crate::status_page::StatusPage;
use crate::worker_reports::WorkerReports;

/// The client port's own service, as gRPC reflection advertises it.
const DISPATCHER_SERVICE: &str =
    <DispatcherServer<DispatcherService> as tonic::server::NamedService>::NAME;

/// How long a stopping dispatcher waits for the Raft node's tasks to close its
/// journal.
const JOURNAL_CLOSE: std::time::Duration = std::time::Duration::from_secs(10);

/// The sockets a dispatcher serves on.
pub struct Listeners {
    /// The Dispatcher service (clients and workers).
    pub client: TcpListener,
    /// The RaftPeer service. `None`: bound at this node's `raft_peers` address
    /// when the group has several nodes (a one-node group has no Raft port).
    pub raft: Option<TcpListener>,
    /// Prometheus metrics at `GET /metrics`, and the status page at `GET /`
    /// (`status_page`).
    pub metrics: Option<TcpListener>,
    /// The gRPC health service alone, in plain text (`--health-addr`), for
    /// orchestrators' probes (`sluice_security::health_port`).
    pub health: Option<TcpListener>,
}

/// Starts this node's Raft member on its journal and serves the Dispatcher
/// service on `listener` (and RaftPeer on this node's Raft address, see
/// [`Listeners::raft`]) until `shutdown` resolves; then stops Raft.
pub async fn run(
    listener: TcpListener,
    config: DispatcherConfig,
    registry: FunctionRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DispatcherError> {
    let listeners = Listeners { client: listener, raft: None, metrics: None, health: None };
    run_with_listeners(listeners, config, registry, shutdown).await
}

/// [`run`], also serving Prometheus metrics at `GET /metrics` on `metrics` (if
/// given) for as long as the dispatcher serves (see `metrics.rs`).
pub async fn run_with_metrics(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    config: DispatcherConfig,
    registry: FunctionRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DispatcherError> {
    let listeners = Listeners { client: listener, raft: None, metrics, health: None };
    run_with_listeners(listeners, config, registry, shutdown).await
}

/// The Raft listener: `given`, or, in a group of several nodes, this node's own
/// Raft address bound now (refused before binding off loopback unprotected).
async fn bind_raft(
    config: &DispatcherConfig,
    given: Option<TcpListener>,
) -> Result<Option<TcpListener>, DispatcherError> {
    if given.is_some() || config.peers.len() <= 1 {
        return Ok(given);
    }
    let own = config.raft_peers.get(&config.node_id).ok_or_else(|| {
        DispatcherError::Config(format!("node {} has no Raft address", config.node_id))
    })?;
    config.check_raft_exposure(own.rsplit_once(':').map_or(own.as_str(), |(h, _)| h))?;
    let listener = TcpListener::bind(own).await.map_err(|e| {
        DispatcherError::Config(format!(
            "cannot listen for Raft on {own} (is the port in use?): {e}"
        ))
    })?;
    Ok(Some(listener))
}

/// [`run`] on the given [`Listeners`].
pub async fn run_with_listeners(
    listeners: Listeners,
    config: DispatcherConfig,
    registry: FunctionRegistry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DispatcherError> {
    config.validate()?;
    let Listeners { client: listener, raft: raft_listener, metrics, health: health_port } =
        listeners;
    let address = listener.local_addr()?;
    config.check_exposure(&address.ip().to_string())?;
    let client_tls = config.security.client_port_tls()?;
    let raft_tls = config.security.raft_port_tls()?;
    let raft_listener = bind_raft(&config, raft_listener).await?;
    if let Some(l) = &raft_listener {
        config.check_raft_exposure(&l.local_addr()?.ip().to_string())?;
    }
    let data_roots = config.data_roots_at(&address);
    tracing::info!(%data_roots, "specs may name files only under these data roots");
    let registry = registry.with_data_roots(data_roots);
    let core = Arc::new(Core::start(&config, &address.to_string()).await?);
    let reports = Arc::new(WorkerReports::default());
    let liveness = Arc::new(Liveness::default());
    // Stops when dropped, at the end of this function (and with it the status
    // page's sampler).
    let _metrics = match metrics {
        Some(l) => {
            let metrics = crate::metrics::registry(core.clone(), reports.clone());
            let s = &config.security;
            let access = sluice_metrics::Access::new(s.tls.as_ref(), s.tokens.clone())?;
            let page = StatusPage::start(
                core.clone(),
                liveness.clone(),
                reports.clone(),
                crate::status_page::SAMPLE_INTERVAL,
            );
            Some(sluice_metrics::spawn_with_routes(l, Arc::new(metrics), access, Arc::new(page))?)
        }
        None => None,
    };
    let mut dial = config.raft_peers.clone();
    dial.extend(config.raft_dial.clone());
    let peer = PeerService::new(
        core.raft().clone(),
        core.vote_gate(),
        core.snapshot_mark(),
        core.leader_heard(),
        dial,
        config.security.peer_client()?,
    );
    let timers = liveness.spawn(core.clone(), config.clone());
    let anonymous_off_loopback = !address.ip().is_loopback() && config.security.tokens.is_none();
    let service = DispatcherService::new(core.clone(), config.clone(), registry, liveness, reports)
        .serving_anonymous_off_loopback(anonymous_off_loopback);
    tracing::info!(%address, node_id = config.node_id, "dispatcher serving");
    // Crash-only: if Raft stops on its own (e.g. its journal failed for longer
    // than the retry budget), stop serving and fail, so a supervisor restarts the
    // process on its work_dir instead of it answering Unavailable forever.
    let (fatal_tx, fatal_rx) = tokio::sync::oneshot::channel::<String>();
    let watcher = {
        let core = core.clone();
        tokio::spawn(async move {
            let reason = core.raft_stopped().await;
            let _ = fatal_tx.send(reason);
        })
    };
    let fatal = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    // Both listeners stop when `stop` has run.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let stop = {
        let fatal = fatal.clone();
        async move {
            tokio::select! {
                _ = shutdown => {}
                reason = fatal_rx => {
                    if let Ok(reason) = reason {
                        tracing::error!("raft stopped, shutting the dispatcher down: {reason}");
                        *fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                    }
                }
            }
            let _ = stop_tx.send(true);
        }
    };
    // `serve_with_incoming*` ignores the builder's tcp_nodelay and keepalive; the
    // incoming sets them (without nodelay every small answer, a heartbeat or a
    // Raft append's ack, can sit ~40 ms in Nagle's buffer waiting for a delayed
    // ACK), and bounds connections (`sluice_security::incoming`).
    let limits = config.server_limits();
    let incoming = sluice_security::Incoming::new(listener, &limits, "dispatcher");
    let (reporter, health_service) = tonic_health::server::health_reporter();
    // tonic-health starts the server's status at SERVING; a probe answered before the
    // task below first ran would see a node that knows no leader yet as ready.
    crate::health::set(&reporter, false).await;
    let health = crate::health::spawn(core.clone(), reporter);
    let plain_health = health_service.clone();
    let health_stop = stopped(stop_rx.clone());
    let health_port = async {
        let Some(l) = health_port else { return Ok(()) };
        sluice_security::health_port::serve(l, plain_health, health_stop)
            .await
            .map_err(DispatcherError::from)
    };
    let client_port = builder(&config, client_tls)?
        .layer(sluice_telemetry::RpcSpans::new("dispatcher"))
        .layer(crate::leader_down::LeaderDownLayer)
        .layer(config.security.client_guard())
        .add_service(health_service)
        .add_service(sluice_proto::reflection::v1(&[DISPATCHER_SERVICE]))
        .add_service(sluice_proto::reflection::v1alpha(&[DISPATCHER_SERVICE]))
        .add_service(
            DispatcherServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, stopped(stop_rx.clone()));
    let raft_port = async {
        let Some(l) = raft_listener else { return Ok(()) };
        tracing::info!(raft_address = %l.local_addr()?, "raft peers served");
        let incoming = sluice_security::Incoming::new(l, &limits, "dispatcher's Raft listener");
        builder(&config, raft_tls)?
            .layer(config.security.peer_guard())
            .add_service(
                RaftPeerServer::new(peer)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, stopped(stop_rx))
            .await
            .map_err(DispatcherError::from)
    };
    let (served, raft_served, health_served, ()) =
        tokio::join!(client_port, raft_port, health_port, stop);
    watcher.abort();
    health.abort();
    timers.abort();
    core.shutdown().await;
    // Aborted tasks drop what they hold once they have stopped: wait for that,
    // then close the core, and wait for the journal to be closed, so a stopped
    // dispatcher can be started again on its work_dir in this process.
    let _ = watcher.await;
    let _ = health.await;
    let _ = timers.await;
    drop(_metrics);
    let journal = config.journal_location();
    match Arc::try_unwrap(core) {
        Ok(core) => core.close().await,
        Err(core) => tracing::warn!(
            holders = Arc::strong_count(&core) - 1,
            "the dispatcher core is still held after shutdown"
        ),
    }
    if !sluice_journal::wait_closed(&journal, JOURNAL_CLOSE).await {
        tracing::warn!(%journal, "the journal is still open {JOURNAL_CLOSE:?} after shutdown");
    }
    served?;
    raft_served?;
    health_served?;
    if let Some(reason) = fatal.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(DispatcherError::Raft(format!(
            "the raft node stopped: {reason}; restart this dispatcher on its work_dir"
        )));
    }
    tracing::info!(%address, "dispatcher stopped");
    Ok(())
}

/// A server with the configured connection and stream bounds, over TLS if given
/// (its handshake bounded too).
fn builder(
    config: &DispatcherConfig,
    tls: Option<ServerTlsConfig>,
) -> Result<Server, DispatcherError> {
    let limits = config.server_limits();
    let builder = limits.apply(Server::builder());
    Ok(match tls {
        Some(tls) => builder.tls_config(limits.tls(tls))?,
        None => builder,
    })
}

/// A dispatcher running on the current runtime. Dropping the handle asks it to
/// stop (it finishes stopping in the background); `shutdown` waits for it.
pub struct DispatcherHandle {
    address: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), DispatcherError>>>,
    /// Becomes true when the server has stopped (asked to, or failed).
    done: watch::Receiver<bool>,
}

/// Spawns [`run`] on the current runtime; the address is the listener's.
pub async fn spawn(
    listener: TcpListener,
    config: DispatcherConfig,
    registry: FunctionRegistry,
) -> Result<DispatcherHandle, DispatcherError> {
    spawn_with_raft(listener, None, config, registry).await
}

/// [`spawn`] with the Raft listener already bound (see [`Listeners::raft`]).
pub async fn spawn_with_raft(
    listener: TcpListener,
    raft: Option<TcpListener>,
    config: DispatcherConfig,
    registry: FunctionRegistry,
) -> Result<DispatcherHandle, DispatcherError> {
    let listeners = Listeners { client: listener, raft, metrics: None, health: None };
    spawn_with_listeners(listeners, config, registry).await
}

/// [`spawn`] on the given [`Listeners`] (e.g. with a metrics listener, which
/// also serves the status page).
pub async fn spawn_with_listeners(
    listeners: Listeners,
    config: DispatcherConfig,
    registry: FunctionRegistry,
) -> Result<DispatcherHandle, DispatcherError> {
    config.validate()?;
    let address = listeners.client.local_addr()?.to_string();
    // Both ports listen before this returns: a caller may add this node to a
    // group at once, and the group dials its Raft port (a bind inside the
    // spawned task raced with that on a busy machine).
    let raft = bind_raft(&config, listeners.raft).await?;
    let listeners = Listeners { raft, ..listeners };
    let (stop, stopped) = oneshot::channel::<()>();
    let (done_tx, done) = watch::channel(false);
    let task = tokio::spawn(async move {
        let result = run_with_listeners(listeners, config, registry, async {
            let _ = stopped.await;
        })
        .await;
        let _ = done_tx.send(true);
        result
    });
    Ok(DispatcherHandle { address, stop: Some(stop), task: Some(task), done })
}

impl DispatcherHandle {
    /// `host:port` the dispatcher serves on.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Resolves once the server has stopped, by [`DispatcherHandle::shutdown`] or
    /// because it failed; does not stop it.
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut done = self.done.clone();
        async move {
            let _ = done.wait_for(|d| *d).await;
        }
    }

    /// Stops serving and waits until the server has stopped.
    pub async fn shutdown(mut self) -> Result<(), DispatcherError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }
}

impl Drop for DispatcherHandle {
    fn drop(&mut self) {
        // No abort: the server must get to stop its Raft node, or that node would
        // keep running (and writing its journal) in the background.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
