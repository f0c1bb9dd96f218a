//! `DispatchServer` and `WorkerServer`: Sluice's servers on background threads of
//! the process's runtime, so a notebook or a test starts a whole service in
//! three lines. They are the same servers `sluice dispatcher` and `sluice worker`
//! run (`sluice_dispatcher::spawn`, `sluice_worker::spawn`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared};

use pyo3::prelude::*;
use sluice_dataset::io::DataRoots;
use sluice_dataset::FunctionRegistry;
use sluice_dispatcher::{DispatcherConfig, DispatcherHandle};
use sluice_worker::{WorkerConfig, WorkerHandle};
use tokio::net::TcpListener;

use crate::security::DispatcherKeywords;
use std::path::PathBuf;
use tokio::runtime::Runtime;

use crate::blocking::{self, seconds};
use crate::errors;
use crate::runtime::{self, Owned};

/// Binds `host:port` on the runtime, with an error that says what to do.
fn bind(
    py: Python<'_>,
    rt: &tokio::runtime::Runtime,
    host: &str,
    port: u16,
) -> PyResult<TcpListener> {
    let addr = format!("{host}:{port}");
    blocking::run(py, rt, None, "binding", async move { TcpListener::bind(addr).await })?.map_err(
        |e| {
            errors::new_err(
                errors::Kind::Unavailable,
                format!("cannot listen on {host}:{port}: {e} (is the port in use?)"),
            )
        },
    )
}

/// The metrics listener at `HOST:PORT` (`metrics_address=`). It has neither TLS
/// nor authentication, so as `sluice dispatcher --metrics-addr` without
/// `--insecure`, it is refused off loopback before anything is bound.
fn bind_metrics(py: Python<'_>, rt: &Runtime, addr: &str) -> PyResult<TcpListener> {
    let bad = || {
        errors::invalid_argument(format!(
            "metrics_address `{addr}` is not HOST:PORT (e.g. 127.0.0.1:0)"
        ))
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let missing = ["TLS and authentication (the metrics endpoint and status page have neither)"];
    sluice_security::require_secure_off_loopback("metrics endpoint", host, &missing, false)
        .map_err(|e| errors::failed_precondition(format!("metrics_address: {e}")))?;
    bind(py, rt, host, port)
}

/// What a running server's Python object holds: its address, its handle until
/// stopped, and a future that resolves once it has stopped (for `join`).
struct Running<H> {
    what: &'static str,
    address: String,
    handle: Mutex<Option<Owned<H>>>,
    stopped: Owned<Shared<BoxFuture<'static, ()>>>,
}

/// The two servers' handles, as [`Running`] uses them.
trait ServerHandle: Send + 'static {
    fn address(&self) -> &str;
    fn stopped(&self) -> BoxFuture<'static, ()>;
    fn shutdown(self) -> BoxFuture<'static, Result<(), String>>;
}

impl ServerHandle for DispatcherHandle {
    fn address(&self) -> &str {
        DispatcherHandle::address(self)
    }
    fn stopped(&self) -> BoxFuture<'static, ()> {
        DispatcherHandle::stopped(self).boxed()
    }
    fn shutdown(self) -> BoxFuture<'static, Result<(), String>> {
        DispatcherHandle::shutdown(self).map(|r| r.map_err(|e| e.to_string())).boxed()
    }
}

impl ServerHandle for WorkerHandle {
    fn address(&self) -> &str {
        WorkerHandle::address(self)
    }
    fn stopped(&self) -> BoxFuture<'static, ()> {
        WorkerHandle::stopped(self).boxed()
    }
    fn shutdown(self) -> BoxFuture<'static, Result<(), String>> {
        WorkerHandle::shutdown(self).map(|r| r.map_err(|e| e.to_string())).boxed()
    }
}

impl<H: ServerHandle> Running<H> {
    fn new(what: &'static str, rt: Arc<Runtime>, handle: H) -> Self {
        let stopped = handle.stopped().shared();
        Running {
            what,
            address: handle.address().to_string(),
            handle: Mutex::new(Some(Owned::new(rt.clone(), handle))),
            stopped: Owned::new(rt, stopped),
        }
    }

    /// Stops the server and waits until it has stopped; a second call does nothing.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(owned) = taken else { return Ok(()) };
        let (rt, handle) = owned.into_inner(self.what)?;
        let what = format!("stopping the {}", self.what);
        blocking::run(py, &rt, None, &what, handle.shutdown())?.map_err(errors::internal)
    }

    /// Waits until the server has stopped, or `timeout` seconds.
    fn join(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        let (rt, stopped) = self.stopped.get(self.what)?;
        blocking::slices(py, rt, timeout, self.what, || stopped.clone())
    }
}

/// A dispatcher node: one node of a Raft group (alone by default).
#[pyclass(frozen, module = "sluice._native")]
pub struct DispatchServer(Running<DispatcherHandle>, Option<String>);

#[pymethods]
impl DispatchServer {
    /// Starts a dispatcher on `host:port` (port 0 picks a free one). With `peers`
    /// (node id → `host:port` of every voter, this node's own entry included) it
    /// is node `node_id` of that group and listens on its own entry. Without
    /// `work_dir` its state is in memory and lost when it stops.
    #[new]
    #[pyo3(signature = (port = 0, host = "127.0.0.1", work_dir = None, peers = None,
        node_id = 1, elements_per_split = 1, worker_addresses = None,
        worker_timeout = 10.0, client_timeout = 60.0, job_gc_timeout = 300.0,
        snapshot_every = None, limits = None, data_roots = None, tls_cert = None, tls_key = None,
        tls_ca = None, auth_tokens = None, peer_ca = None, peer_secret_file = None,
        metrics_address = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        port: u16,
        host: &str,
        work_dir: Option<String>,
        peers: Option<BTreeMap<u64, String>>,
        node_id: u64,
        elements_per_split: u64,
        worker_addresses: Option<Vec<String>>,
        worker_timeout: f64,
        client_timeout: f64,
        job_gc_timeout: f64,
        snapshot_every: Option<u64>,
        limits: Option<BTreeMap<String, f64>>,
        data_roots: Option<Vec<String>>,
        tls_cert: Option<PathBuf>,
        tls_key: Option<PathBuf>,
        tls_ca: Option<PathBuf>,
        auth_tokens: Option<PathBuf>,
        peer_ca: Option<PathBuf>,
        peer_secret_file: Option<PathBuf>,
        metrics_address: Option<String>,
    ) -> PyResult<Self> {
        let keywords = DispatcherKeywords {
            tls_cert,
            tls_key,
            tls_ca,
            auth_tokens,
            peer_ca,
            peer_secret_file,
        };
        // Each entry `host:port[/raft_port]`, as `sluice dispatcher --peers`.
        let peers = peers.unwrap_or_default();
        let group: Vec<String> = peers.iter().map(|(id, a)| format!("{id}={a}")).collect();
        let (peers, raft_peers) = sluice_dispatcher::parse_group(&group.join(","))
            .map_err(|e| errors::invalid_argument(e.to_string()))?;
        let data_roots = parse_roots(data_roots)?;
        let mut config = DispatcherConfig {
            elements_per_split,
            node_id,
            snapshot_every: snapshot_every
                .unwrap_or_else(|| DispatcherConfig::default_snapshot_every(work_dir.as_deref())),
            work_dir,
            worker_addresses: worker_addresses.unwrap_or_default(),
            worker_timeout: seconds("worker_timeout", worker_timeout)?,
            client_timeout: seconds("client_timeout", client_timeout)?,
            job_gc_timeout: seconds("job_gc_timeout", job_gc_timeout)?,
            peers,
            raft_peers,
            security: keywords.security()?,
            data_roots,
            ..DispatcherConfig::default()
        };
        crate::limits::apply(&mut config, limits)?;
        config.validate().map_err(|e| errors::invalid_argument(e.to_string()))?;
        let (host, port) = match config.peers.get(&config.node_id) {
            Some(own) => own
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| {
                    errors::invalid_argument(format!("peer address `{own}` is not HOST:PORT"))
                })?,
            None => (host.to_string(), port),
        };
        // Refused before binding, as `sluice dispatcher`: nothing listens off
        // loopback unprotected, not even for a moment.
        config.check_exposure(&host).map_err(|e| errors::failed_precondition(e.to_string()))?;
        let rt = runtime::get()?;
        let metrics = match metrics_address {
            Some(addr) => Some(bind_metrics(py, &rt, &addr)?),
            None => None,
        };
        let listener = bind(py, &rt, &host, port)?;
        Self::start(py, rt, listener, None, metrics, config)
    }

    /// `host:port` this dispatcher serves on.
    #[getter]
    fn address(&self) -> &str {
        &self.0.address
    }

    /// `host:port` of the metrics listener (`metrics_address=`): Prometheus
    /// metrics at `/metrics`, the status page at `/` and `/status.json`. `None`
    /// without one.
    #[getter]
    fn metrics_address(&self) -> Option<&str> {
        self.1.as_deref()
    }

    /// Stops serving and waits until the dispatcher has stopped (its journal
    /// closed). Stopping twice is allowed.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.0.stop(py)
    }

    /// Blocks until the dispatcher stops (another thread called `stop`, or it
    /// failed), or `timeout` seconds pass (then `DeadlineExceededError`).
    #[pyo3(signature = (timeout = None))]
    fn join(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.0.join(py, timeout)
    }
}

impl DispatchServer {
    fn start(
        py: Python<'_>,
        rt: Arc<Runtime>,
        listener: TcpListener,
        raft: Option<TcpListener>,
        metrics: Option<TcpListener>,
        config: DispatcherConfig,
    ) -> PyResult<Self> {
        let registry = FunctionRegistry::builtin();
        let metrics_address = match &metrics {
            Some(l) => {
                Some(l.local_addr().map_err(|e| errors::internal(e.to_string()))?.to_string())
            }
            None => None,
        };
        let listeners =
            sluice_dispatcher::Listeners { client: listener, raft, metrics, health: None };
        let handle = blocking::run(py, &rt, None, "starting the dispatcher", async move {
            sluice_dispatcher::spawn_with_listeners(listeners, config, registry).await
        })?
        .map_err(|e| errors::invalid_argument(e.to_string()))?;
        Ok(DispatchServer(Running::new("dispatch server", rt, handle), metrics_address))
    }
}

/// Starts `n` dispatcher nodes of one Raft group on loopback (free ports), the
/// way `sluice local` does: every listener is bound before any node starts, so
/// each knows all its peers. `work_dir`: each node journals in `node-<id>` there.
#[pyfunction]
#[pyo3(signature = (n = 3, work_dir = None, limits = None, data_roots = None, tls_cert = None,
    tls_key = None, tls_ca = None, auth_tokens = None, peer_ca = None, peer_secret_file = None))]
#[allow(clippy::too_many_arguments)]
pub fn start_quorum(
    py: Python<'_>,
    n: u64,
    work_dir: Option<String>,
    limits: Option<BTreeMap<String, f64>>,
    data_roots: Option<Vec<String>>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    auth_tokens: Option<PathBuf>,
    peer_ca: Option<PathBuf>,
    peer_secret_file: Option<PathBuf>,
) -> PyResult<Vec<DispatchServer>> {
    let keywords =
        DispatcherKeywords { tls_cert, tls_key, tls_ca, auth_tokens, peer_ca, peer_secret_file };
    let security = keywords.security()?;
    let data_roots = parse_roots(data_roots)?;
    if n == 0 {
        return Err(errors::invalid_argument("a quorum needs at least 1 dispatcher"));
    }
    let rt = runtime::get()?;
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(bind(py, &rt, "127.0.0.1", 0)?);
    }
    // Each node's Raft port is its own listener (a group of one has none).
    let mut raft_listeners = Vec::new();
    for _ in 0..(if n > 1 { n } else { 0 }) {
        raft_listeners.push(bind(py, &rt, "127.0.0.1", 0)?);
    }
    let address_of = |i: usize, l: &TcpListener| -> PyResult<(u64, String)> {
        let addr = l.local_addr().map_err(|e| errors::internal(e.to_string()))?;
        Ok((i as u64 + 1, addr.to_string()))
    };
    let peers: BTreeMap<u64, String> =
        listeners.iter().enumerate().map(|(i, l)| address_of(i, l)).collect::<PyResult<_>>()?;
    let raft_peers: BTreeMap<u64, String> = raft_listeners
        .iter()
        .enumerate()
        .map(|(i, l)| address_of(i, l))
        .collect::<PyResult<_>>()?;
    let mut servers = Vec::new();
    let mut raft_listeners = raft_listeners.into_iter();
    for (i, listener) in listeners.into_iter().enumerate() {
        let mut config = DispatcherConfig {
            node_id: i as u64 + 1,
            peers: peers.clone(),
            raft_peers: raft_peers.clone(),
            security: security.clone(),
            work_dir: work_dir.clone(),
            snapshot_every: DispatcherConfig::default_snapshot_every(work_dir.as_deref()),
            data_roots: data_roots.clone(),
            ..DispatcherConfig::default()
        };
        crate::limits::apply(&mut config, limits.clone())?;
        let raft = raft_listeners.next();
        servers.push(DispatchServer::start(py, rt.clone(), listener, raft, None, config)?);
    }
    Ok(servers)
}

/// A worker: registers with the dispatchers, runs its tasks' pipelines and
/// streams elements to readers.
#[pyclass(frozen, module = "sluice._native")]
pub struct WorkerServer(Running<WorkerHandle>);

#[pymethods]
impl WorkerServer {
    /// Starts a worker on `host:port` (port 0 picks a free one) that registers
    /// with `dispatcher_addresses` (every dispatcher's `host:port`).
    #[new]
    #[pyo3(signature = (dispatcher_addresses, port = 0, host = "127.0.0.1",
        advertise = None, buffer = 256, heartbeat_interval = 0.5, drain_timeout = 0.0,
        dispatcher_timeout = 60.0, splits_per_request = None, data_roots = None,
        tls_cert = None, tls_key = None, tls_ca = None, auth_tokens = None, token = None,
        python = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dispatcher_addresses: Vec<String>,
        port: u16,
        host: &str,
        advertise: Option<String>,
        buffer: usize,
        heartbeat_interval: f64,
        drain_timeout: f64,
        dispatcher_timeout: f64,
        splits_per_request: Option<u32>,
        data_roots: Option<Vec<String>>,
        tls_cert: Option<PathBuf>,
        tls_key: Option<PathBuf>,
        tls_ca: Option<PathBuf>,
        auth_tokens: Option<PathBuf>,
        token: Option<String>,
        python: Option<Bound<'_, PythonPool>>,
    ) -> PyResult<Self> {
        let mut config = WorkerConfig::new(dispatcher_addresses);
        config.data_roots = parse_roots(data_roots)?;
        config.security =
            crate::security::worker((tls_cert, tls_key, tls_ca), auth_tokens, token.as_deref())?;
        config.advertised_address = advertise;
        config.task_buffer_elements = buffer;
        // None: the worker's own default (`sluice_worker::config`), written once.
        if let Some(n) = splits_per_request {
            config.splits_per_request = n;
        }
        config.heartbeat_interval = seconds("heartbeat_interval", heartbeat_interval)?;
        config.drain_timeout = seconds("drain_timeout", drain_timeout)?;
        config.dispatcher_retry = config
            .dispatcher_retry
            .with_deadline(seconds("dispatcher_timeout", dispatcher_timeout)?);
        config.validate().map_err(|e| errors::invalid_argument(e.to_string()))?;
        // Refused before binding, as `sluice worker`.
        let s = &config.security;
        sluice_security::require_secure_off_loopback("worker", host, &s.missing(), s.insecure)
            .map_err(|e| errors::failed_precondition(e.to_string()))?;
        let mut registry = FunctionRegistry::builtin();
        if let Some(python) = python {
            sluice_security::require_auth_for_user_code(host, s.tokens.is_some())
                .map_err(|e| errors::failed_precondition(e.to_string()))?;
            registry = registry.with_python(python.get().clone().start(py)?);
        }
        let rt = runtime::get()?;
        let listener = bind(py, &rt, host, port)?;
        let handle = blocking::run(py, &rt, None, "starting the worker", async move {
            sluice_worker::spawn(listener, config, registry).await
        })?
        .map_err(|e| errors::invalid_argument(e.to_string()))?;
        Ok(WorkerServer(Running::new("worker server", rt, handle)))
    }

    /// The address readers dial (`host:port`, or `advertise`).
    #[getter]
    fn address(&self) -> &str {
        &self.0.address
    }

    /// Stops the worker (draining streams for up to `drain_timeout`) and waits
    /// until it has stopped. Stopping twice is allowed.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.0.stop(py)
    }

    /// Blocks until the worker stops, or `timeout` seconds pass (then
    /// `DeadlineExceededError`).
    #[pyo3(signature = (timeout = None))]
    fn join(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        self.0.join(py, timeout)
    }
}

/// A worker's pool of Python processes (`allow_python=True` in `sluice.WorkerServer`,
/// `sluice worker --allow-python`): its settings, started with the worker.
#[pyclass(frozen, module = "sluice._native")]
#[derive(Clone)]
pub struct PythonPool {
    config: sluice_pyexec::PoolConfig,
}

#[pymethods]
impl PythonPool {
    /// `python`: the interpreter; `processes` 0 = one per core; `call_timeout` in
    /// seconds; `memory_limit_mb` per process; `env`: extra environment of the
    /// processes (e.g. `PYTHONPATH`).
    #[new]
    #[pyo3(signature = (python, processes = 0, call_timeout = 60.0, memory_limit_mb = None,
        env = None))]
    fn new(
        python: PathBuf,
        processes: usize,
        call_timeout: f64,
        memory_limit_mb: Option<u64>,
        env: Option<Vec<(String, String)>>,
    ) -> PyResult<Self> {
        let mut config = sluice_pyexec::PoolConfig::new(python);
        if processes > 0 {
            config.processes = processes;
            config.queue_bound = 2 * processes;
        }
        config.call_timeout = seconds("python_call_timeout", call_timeout)?;
        if config.call_timeout.is_zero() {
            return Err(errors::invalid_argument("python_call_timeout must be > 0 seconds"));
        }
        config.memory_limit_bytes = memory_limit_mb.map(|mb| mb.saturating_mul(1 << 20));
        config.env = env.unwrap_or_default();
        Ok(PythonPool { config })
    }
}

impl PythonPool {
    /// Starts the processes (without the GIL: each imports numpy first).
    fn start(self, py: Python<'_>) -> PyResult<sluice_dataset::SharedPythonExecutor> {
        let pool = py
            .detach(|| sluice_pyexec::Pool::start(self.config))
            .map_err(|e| errors::failed_precondition(format!("allow_python: {e}")))?;
        Ok(std::sync::Arc::new(pool))
    }
}

/// `data_roots=[...]` (`sluice dispatcher --data-roots`): `None` keeps the defaults
/// of the listen address; a list (possibly empty) is exactly the roots.
fn parse_roots(roots: Option<Vec<String>>) -> PyResult<Option<DataRoots>> {
    roots
        .map(|r| DataRoots::parse(&r.join(",")))
        .transpose()
        .map_err(|e| errors::invalid_argument(e.to_string()))
}
