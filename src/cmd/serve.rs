//! `sluice dispatcher` and `sluice worker`: long-running servers. Each prints
//! `listening on HOST:PORT` on stdout once it serves (so scripts can use port 0),
//! and stops on Ctrl-C or SIGTERM.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use sluice_dataset::FunctionRegistry;
use sluice_dispatcher::DispatcherConfig;
use sluice_worker::WorkerConfig;
use tokio::net::TcpListener;

#[derive(Args, Debug)]
pub struct DispatcherArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 5050)]
    pub port: u16,
    /// Source elements per dynamic-sharding split.
    #[arg(long, default_value_t = 1)]
    pub elements_per_split: u64,
    /// Where to journal state: a directory (sled), or file://, s3://, gs://,
    /// memory:// URL. Without it, state is in memory and lost when the process stops.
    #[arg(long)]
    pub work_dir: Option<String>,
    /// This node's id in the dispatcher group.
    #[arg(long, default_value_t = 1)]
    pub node_id: u64,
    /// Every dispatcher of the group: ID=HOST:PORT[/RAFT_PORT], comma-separated
    /// (e.g. 1=h1:5051/6051,2=h2:5051/6051). HOST:PORT is the client port; RAFT_PORT
    /// (or RAFT_HOST:RAFT_PORT) the node's Raft listener, by default PORT+1000.
    /// This node listens on its own entry (--host/--port are then ignored).
    #[arg(long)]
    pub peers: Option<String>,
    /// Send Raft traffic for some peers elsewhere than their --peers Raft address
    /// (e.g. through a proxy): 2=host:port,3=host:port.
    #[arg(long)]
    pub raft_dial: Option<String>,
    /// Log entries between snapshots (the log before a snapshot is purged).
    /// Default: 10000 on local disk, 1000 on object storage. Node N > 1 adds an
    /// eighth of it per id after the first (ids past 4 wrap around), so a group's
    /// nodes do not snapshot at the same index.
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// The fixed worker list for static sharding (--mode file|data|file_or_data|hint):
    /// host:port of each worker, comma-separated; worker i reads shard i. When set,
    /// only these workers may register. Give every dispatcher the same list.
    #[arg(long, value_delimiter = ',')]
    pub worker_addresses: Vec<String>,
    /// Declare a worker lost after this many seconds without a heartbeat and end
    /// its unfinished tasks (fractions allowed; 0 = never).
    #[arg(long, default_value_t = 10.0)]
    pub worker_timeout_secs: f64,
    /// Release a consumer after this many seconds without a heartbeat (0 = never).
    #[arg(long, default_value_t = 60.0)]
    pub client_timeout_secs: f64,
    /// Garbage-collect an unfinished iteration after this many seconds without a
    /// consumer (0 = never).
    #[arg(long, default_value_t = 300.0)]
    pub job_gc_timeout_secs: f64,
    /// Also garbage-collect DYNAMIC iterations (a new reader of a collected one
    /// starts the epoch over).
    #[arg(long)]
    pub gc_dynamic_jobs: bool,
    /// Raft heartbeat interval of a leader, in milliseconds. openraft 0.9 also
    /// gives every AppendEntries (entries included, which wait for the follower's
    /// fsync) this long to answer.
    #[arg(long, default_value_t = default_raft_timers().0)]
    pub raft_heartbeat_ms: u64,
    /// Raft election timeout, randomised in MIN..MAX milliseconds. A follower that
    /// last heard a leader waits MAX (the leader's lease) plus the timeout before it
    /// stands, so MAX bounds the failover time; raise both on a heavily loaded host
    /// whose leader may stall that long (spurious elections).
    #[arg(long, value_name = "MIN..MAX", default_value_t = default_raft_timers().1)]
    pub election_timeout_ms: MsRange,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (docs/architecture.md,
    /// "Metrics") and the status page at http://HOST:PORT/ (and /status.json;
    /// docs/operations-status.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Also serve the gRPC health service (grpc.health.v1) alone, in plain text and
    /// without a token, at HOST:PORT: for Kubernetes' native gRPC probes, which
    /// cannot speak TLS (docs/operations.md, "Health checks").
    #[arg(long, env = "SLUICE_HEALTH_ADDR", value_name = "HOST:PORT")]
    pub health_addr: Option<String>,
    #[command(flatten)]
    pub limits: super::limits::LimitsArgs,
    #[command(flatten)]
    pub server: super::limits::ServerArgs,
    #[command(flatten)]
    pub tls: super::security::TlsFlags,
    #[command(flatten)]
    pub auth: super::security::ServerAuthFlags,
    #[command(flatten)]
    pub peer: super::security::PeerFlags,
    #[command(flatten)]
    pub data_roots: super::DataRootsFlag,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub dispatcher: super::DispatcherFlags,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Address clients should dial, if not HOST:PORT.
    #[arg(long)]
    pub advertise: Option<String>,
    /// Elements buffered per task.
    #[arg(long, default_value_t = 256)]
    pub buffer: usize,
    /// DYNAMIC mode: the most splits taken per request to the dispatcher
    /// (1..=1024); within it a task asks for about 20 ms of its work at a time.
    #[arg(long, default_value_t = sluice_worker::config::DEFAULT_SPLITS_PER_REQUEST)]
    pub splits_per_request: u32,
    /// Byte bound of each cross-trainer cache task's window (default 256 MiB).
    #[arg(long, default_value_t = sluice_worker::DEFAULT_CROSS_TRAINER_CACHE_BYTES)]
    pub cross_trainer_cache_bytes: u64,
    /// On SIGTERM/Ctrl-C: stop taking tasks and streams, and give streams in
    /// progress this long to finish (DYNAMIC tasks end with the splits they hold)
    /// before cutting them. 0 stops at once.
    #[arg(long, default_value_t = 20)]
    pub drain_timeout_secs: u64,
    /// Exit (status 0) once every task this worker ran has finished and been
    /// reported, and no new one came for --idle-grace-secs.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// With --exit-when-idle: how long to stay idle before exiting.
    #[arg(long, default_value_t = 5)]
    pub idle_grace_secs: u64,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (docs/architecture.md,
    /// "Metrics").
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Also serve the gRPC health service (grpc.health.v1) alone, in plain text and
    /// without a token, at HOST:PORT: for Kubernetes' native gRPC probes, which
    /// cannot speak TLS (docs/operations.md, "Health checks").
    #[arg(long, env = "SLUICE_HEALTH_ADDR", value_name = "HOST:PORT")]
    pub health_addr: Option<String>,
    #[command(flatten)]
    pub server: super::limits::ServerArgs,
    #[command(flatten)]
    pub auth: super::security::ServerAuthFlags,
    #[command(flatten)]
    pub data_roots: super::DataRootsFlag,
    #[command(flatten)]
    pub python: super::python::PythonFlags,
}

/// The `--health-addr` listener, if asked for: plain text anywhere, since it
/// serves nothing but the health service (`sluice_security::health_port`).
async fn bind_health(addr: Option<&str>) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("--health-addr {addr}: cannot listen (is the port in use?)"))?;
    Ok(Some(listener))
}

async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind((host, port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port} (is the port in use?)"))?;
    println!("listening on {}", listener.local_addr()?);
    Ok(listener)
}

/// The `--metrics-addr` listener, if asked for. Its address goes to the log (not
/// stdout, whose first line scripts read for the service address). It serves TLS
/// with the server's certificate and wants a `metrics` token when the server has
/// them (`sluice_metrics::Access`); off loopback it needs both, or `--insecure`
/// (refused before binding, as the service's listeners).
pub(super) async fn bind_metrics(
    addr: Option<&str>,
    tls: Option<&sluice_security::TlsSettings>,
    tokens: bool,
    insecure: bool,
) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    // The same listener serves the dispatcher's status page (docs/operations-status.md).
    let tls = tls.filter(|t| t.has_identity());
    let missing = sluice_security::missing_protections(tls, tokens);
    sluice_security::require_secure_off_loopback("metrics endpoint", host, &missing, insecure)
        .context("--metrics-addr")?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}: cannot listen (is the port in use?)"))?;
    Ok(Some(listener))
}

/// Ctrl-C or SIGTERM. The handlers are installed when this is called, not when the
/// future is first polled: callers call it before printing `listening on`, so a
/// signal sent as soon as a script reads that line is caught (and not the default
/// action, which kills the process without draining).
fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        Ok(async move {
            tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

pub async fn dispatcher(a: DispatcherArgs) -> anyhow::Result<()> {
    let (peers, raft_peers) = match &a.peers {
        Some(p) => sluice_dispatcher::parse_group(p)?,
        None => Default::default(),
    };
    let security = sluice_dispatcher::DispatcherSecurity {
        tls: a.tls.settings()?,
        tokens: a.auth.tokens()?,
        peer_ca: a.peer.peer_ca()?,
        peer_secret: a.peer.peer_secret()?,
        insecure: a.auth.insecure,
    };
    let raft_dial = match &a.raft_dial {
        Some(p) => sluice_dispatcher::parse_peers(p)?,
        None => Default::default(),
    };
    let mut config = DispatcherConfig {
        elements_per_split: a.elements_per_split,
        node_id: a.node_id,
        peers,
        raft_peers,
        security,
        raft_dial,
        work_dir: a.work_dir.clone(),
        snapshot_every: a
            .snapshot_every
            .unwrap_or_else(|| DispatcherConfig::default_snapshot_every(a.work_dir.as_deref())),
        worker_addresses: a.worker_addresses.iter().map(|w| w.trim().to_string()).collect(),
        worker_timeout: secs("--worker-timeout-secs", a.worker_timeout_secs)?,
        client_timeout: secs("--client-timeout-secs", a.client_timeout_secs)?,
        job_gc_timeout: secs("--job-gc-timeout-secs", a.job_gc_timeout_secs)?,
        gc_dynamic_jobs: a.gc_dynamic_jobs,
        heartbeat_interval: Duration::from_millis(a.raft_heartbeat_ms),
        election_timeout_min: Duration::from_millis(a.election_timeout_ms.min),
        election_timeout_max: Duration::from_millis(a.election_timeout_ms.max),
        data_roots: a.data_roots.roots()?,
        ..DispatcherConfig::default()
    };
    a.limits.apply(&mut config)?;
    config.server = a.server.limits()?;
    config.validate()?;
    if config.work_dir.is_none() {
        tracing::warn!(
            "no --work-dir: dispatcher state is in memory and is lost when this process stops"
        );
    }
    // Before the service's listener, whose `listening on` line says "ready".
    let stop = stop_signal()?;
    let (host, port) = match config.peers.get(&config.node_id) {
        Some(own) => own
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .with_context(|| format!("peer address `{own}` is not HOST:PORT"))?,
        None => (a.host.clone(), a.port),
    };
    // Refused before anything is bound: nothing listens off loopback unprotected.
    config.check_exposure(&host)?;
    if let Some(raft) = config.raft_peers.get(&config.node_id) {
        let raft_host = raft.rsplit_once(':').map_or(raft.as_str(), |(h, _)| h);
        config.check_raft_exposure(raft_host)?;
    }
    let s = &config.security;
    let metrics =
        bind_metrics(a.metrics_addr.as_deref(), s.tls.as_ref(), s.tokens.is_some(), s.insecure)
            .await?;
    let raft = match config.raft_peers.get(&config.node_id) {
        Some(own) if config.peers.len() > 1 => {
            Some(TcpListener::bind(own).await.with_context(|| {
                format!("cannot listen for Raft on {own} (is the port in use?)")
            })?)
        }
        _ => None,
    };
    let health = bind_health(a.health_addr.as_deref()).await?;
    let listener = bind(&host, port).await?;
    let registry = FunctionRegistry::builtin();
    let listeners = sluice_dispatcher::Listeners { client: listener, raft, metrics, health };
    sluice_dispatcher::run_with_listeners(listeners, config, registry, stop).await?;
    Ok(())
}

/// A non-negative number of seconds.
fn secs(flag: &str, v: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(v)
        .map_err(|_| anyhow::anyhow!("{flag} {v}: give a number of seconds >= 0"))
}

pub async fn worker(a: WorkerArgs) -> anyhow::Result<()> {
    let mut config = WorkerConfig::new(a.dispatcher.dispatchers.clone());
    config.advertised_address = a.advertise;
    config.task_buffer_elements = a.buffer;
    config.splits_per_request = a.splits_per_request;
    config.dispatcher_retry = a.dispatcher.retry();
    config.cross_trainer_cache_bytes = a.cross_trainer_cache_bytes;
    config.drain_timeout = std::time::Duration::from_secs(a.drain_timeout_secs);
    config.exit_when_idle =
        a.exit_when_idle.then(|| std::time::Duration::from_secs(a.idle_grace_secs));
    config.server = a.server.limits()?;
    config.security = sluice_worker::WorkerSecurity {
        tls: a.dispatcher.tls.settings()?,
        tokens: a.auth.tokens()?,
        token: a.dispatcher.token.secret()?,
        insecure: a.auth.insecure,
    };
    config.data_roots = a.data_roots.roots()?;
    config.validate()?;
    // Refused before anything is bound: nothing listens off loopback unprotected.
    let s = &config.security;
    sluice_security::require_secure_off_loopback("worker", &a.host, &s.missing(), s.insecure)?;
    let registry = a.python.attach(FunctionRegistry::builtin(), &a.host, s.tokens.is_some())?;
    let stop = stop_signal()?;
    let metrics =
        bind_metrics(a.metrics_addr.as_deref(), s.tls.as_ref(), s.tokens.is_some(), s.insecure)
            .await?;
    let health = bind_health(a.health_addr.as_deref()).await?;
    let listener = bind(&a.host, a.port).await?;
    sluice_worker::run_with_health(listener, metrics, health, config, registry, stop).await?;
    Ok(())
}

/// `MIN..MAX` in milliseconds, e.g. `150..300`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsRange {
    pub min: u64,
    pub max: u64,
}

impl std::fmt::Display for MsRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.min, self.max)
    }
}

impl std::str::FromStr for MsRange {
    type Err = String;

    fn from_str(s: &str) -> Result<MsRange, String> {
        let bad = || format!("`{s}` is not MIN..MAX in milliseconds (e.g. 150..300)");
        let (min, max) = s.split_once("..").ok_or_else(bad)?;
        let min: u64 = min.trim().parse().map_err(|_| bad())?;
        let max: u64 = max.trim().parse().map_err(|_| bad())?;
        Ok(MsRange { min, max })
    }
}

/// The Raft timers' defaults, as the dispatcher's config defines them: the
/// heartbeat and the election timeout range, in milliseconds.
fn default_raft_timers() -> (u64, MsRange) {
    let d = sluice_dispatcher::DispatcherConfig::default();
    let ms = |t: Duration| u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
    let range = MsRange { min: ms(d.election_timeout_min), max: ms(d.election_timeout_max) };
    (ms(d.heartbeat_interval), range)
}
