//! A cluster of real processes on 127.0.0.1 that faults can be injected into:
//! three `sluice dispatcher` nodes, W `sluice worker`s, one proxy per directed
//! pair of dispatchers, and, for a work_dir on S3, the moto server behind a proxy.
//!
//! ```text
//!   clients, workers ───────────────► node i (real address)
//!   node i ──Raft for j──► proxy (i→j) ──► node j's Raft port   (--raft-dial j=proxy)
//!   node i ──AWS_ENDPOINT──► proxy (s3) ──► moto       (work_dir on S3 only)
//! ```
//!
//! Every address is fixed at start (ports reserved on 127.0.0.1 below the kernel's
//! ephemeral range and held for the cluster's life, see `sluice_testkit::Port`), so
//! a restarted dispatcher or worker comes back at the same address and on the same
//! work_dir. Every child is killed and reaped when the cluster drops, and by the
//! kernel if the harness dies (see `sluice_testkit::spawner`); the local work_dirs
//! live in a temporary directory removed with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::proxy::{Mode, Proxy};
use anyhow::{bail, Context};
use sluice_client::{Client, RetryPolicy, ServiceStatus};
use sluice_testkit::{harness_log_env, log_tail, Child, MotoServer, Port, Spec, Stderr};

/// Where the dispatchers journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// sled, each node in `<tmp>/work/node-<id>`.
    LocalDisk,
    /// `s3://sluice/chaos/node-<id>` on a moto server reached through a proxy.
    S3,
}

impl Storage {
    /// The history's `work_dir_kind`.
    pub fn kind_name(self) -> &'static str {
        match self {
            Storage::LocalDisk => "local disk",
            Storage::S3 => "s3",
        }
    }
}

/// Everything needed to start the processes.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The `sluice` executable.
    pub sluice: PathBuf,
    /// Each child's stderr goes to `<logs>/<name>.log`.
    pub logs: PathBuf,
    pub storage: Storage,
    pub workers: u32,
    /// `sluice worker --buffer`.
    pub worker_buffer: usize,
    /// `sluice worker --splits-per-request`.
    pub splits_per_request: u32,
    /// `sluice dispatcher --elements-per-split`.
    pub elements_per_split: u64,
    /// `sluice dispatcher --snapshot-every`.
    pub snapshot_every: u64,
    /// `sluice worker --timeout-secs`: how long a worker retries an unavailable
    /// dispatcher (longer than any fault lasts).
    pub worker_timeout_secs: u64,
}

/// Nodes are numbered 1..=3, workers 0..W.
pub const NODES: u64 = 3;

/// Connections per proxy: Raft keeps one or two per direction; S3 a pool per node.
const PROXY_CONNECTIONS: usize = 128;

struct S3 {
    proxy: Proxy,
    _moto: MotoServer,
}

pub struct Cluster {
    pub config: ClusterConfig,
    /// Dispatcher addresses, node `i` at index `i - 1`.
    pub addresses: Vec<String>,
    work_dir: String,
    dispatcher_specs: Vec<Spec>,
    /// Each dispatcher's log (its stderr), node `i` at index `i - 1`.
    dispatcher_logs: Vec<PathBuf>,
    dispatchers: Vec<Option<Child>>,
    paused: BTreeSet<u64>,
    worker_specs: Vec<Spec>,
    worker_logs: Vec<PathBuf>,
    /// Each worker's address, worker `w` at index `w` (fixed for its life).
    worker_addresses: Vec<String>,
    workers: Vec<Option<Child>>,
    /// (from, to) → the proxy node `from` dials for node `to`.
    links: BTreeMap<(u64, u64), Proxy>,
    s3: Option<S3>,
    /// One client per node (`probe_policy`), for status probes.
    probes: Vec<Client>,
    /// Local work_dirs (removed on drop, after the children: fields drop in order).
    state: tempfile::TempDir,
    /// Every dispatcher's and worker's port, held while the cluster lives so a
    /// restarted process finds its port free.
    _ports: Vec<Port>,
}

impl Cluster {
    /// Starts the proxies, three dispatchers and the workers; returns once a leader
    /// is elected and every worker is registered.
    pub async fn start(config: ClusterConfig) -> anyhow::Result<Cluster> {
        std::fs::create_dir_all(&config.logs)
            .with_context(|| format!("creating {}", config.logs.display()))?;
        let state = tempfile::Builder::new().prefix("sluice-chaos-").tempdir()?;
        // Reserved below the ephemeral range, so the proxies and moto (which bind
        // port 0) cannot be given one, nor can anything take one while its process
        // is down between a kill and a restart (see `sluice_testkit::Port`).
        // Client ports, then each node's Raft port.
        let mut ports = Port::reserve_n(2 * NODES as usize)?;
        let addresses: Vec<String> = ports[..NODES as usize].iter().map(Port::address).collect();
        let raft_addresses: Vec<String> =
            ports[NODES as usize..].iter().map(Port::address).collect();
        let mut links = BTreeMap::new();
        for from in 1..=NODES {
            for to in (1..=NODES).filter(|to| *to != from) {
                links.insert(
                    (from, to),
                    Proxy::start(&raft_addresses[to as usize - 1], PROXY_CONNECTIONS).await?,
                );
            }
        }
        let mut envs = vec![];
        let (work_dir, s3) = match config.storage {
            Storage::LocalDisk => (state.path().join("work").display().to_string(), None),
            Storage::S3 => {
                let moto = tokio::task::spawn_blocking(MotoServer::try_start)
                    .await?
                    .map_err(|e| anyhow::anyhow!("starting the S3 test server: {e}"))?;
                let target = moto.endpoint().trim_start_matches("http://").to_string();
                let proxy = Proxy::start(&target, PROXY_CONNECTIONS).await?;
                for (k, v) in moto.env() {
                    let v =
                        if k == "AWS_ENDPOINT" { format!("http://{}", proxy.address()) } else { v };
                    envs.push((k, v));
                }
                (format!("s3://{}/chaos", moto.bucket()), Some(S3 { proxy, _moto: moto }))
            }
        };
        let peers = sluice_testkit::group_flag(&addresses, &raft_addresses);
        let dispatcher_logs: Vec<PathBuf> =
            (1..=NODES).map(|id| config.logs.join(format!("dispatcher-{id}.log"))).collect();
        let dispatcher_specs = (1..=NODES)
            .map(|id| {
                let dial: Vec<String> = (1..=NODES)
                    .filter(|to| *to != id)
                    .map(|to| format!("{to}={}", links[&(id, to)].address()))
                    .collect();
                let args = [
                    "dispatcher",
                    "--node-id",
                    &id.to_string(),
                    "--peers",
                    &peers,
                    "--raft-dial",
                    &dial.join(","),
                    "--work-dir",
                    &work_dir,
                    "--snapshot-every",
                    &config.snapshot_every.to_string(),
                    "--elements-per-split",
                    &config.elements_per_split.to_string(),
                ];
                Spec::new(&config.sluice, args)
                    .envs(envs.iter().cloned().chain([harness_log_env()]))
                    .stderr(Stderr::File(dispatcher_logs[id as usize - 1].clone()))
            })
            .collect();
        let mut worker_specs = vec![];
        let mut worker_logs = vec![];
        let mut worker_addresses = vec![];
        for w in 0..config.workers {
            let reserved = Port::reserve()?;
            worker_addresses.push(reserved.address());
            let (spec, log) = worker_spec(&config, &addresses, reserved.number(), w);
            ports.push(reserved);
            worker_specs.push(spec);
            worker_logs.push(log);
        }
        let probes = addresses
            .iter()
            .map(|a| Client::new(std::slice::from_ref(a), probe_policy()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut cluster = Cluster {
            probes,
            dispatchers: (0..NODES).map(|_| None).collect(),
            workers: (0..config.workers).map(|_| None).collect(),
            config,
            addresses,
            work_dir,
            dispatcher_specs,
            dispatcher_logs,
            paused: BTreeSet::new(),
            worker_specs,
            worker_logs,
            worker_addresses,
            links,
            s3,
            state,
            _ports: ports,
        };
        for id in 1..=NODES {
            cluster.start_dispatcher(id).await?;
        }
        cluster.leader(Duration::from_secs(30)).await?;
        for w in 0..cluster.config.workers {
            cluster.start_worker(w).await?;
        }
        cluster.wait_workers(cluster.config.workers as usize, Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    /// A client of every dispatcher.
    pub fn client(&self, policy: RetryPolicy) -> anyhow::Result<Client> {
        Ok(Client::new(&self.addresses, policy)?)
    }

    /// The journal location (directory or URL) the nodes share, each in `node-<id>`.
    pub fn work_dir(&self) -> &str {
        &self.work_dir
    }

    pub fn log(&self, id: u64) -> PathBuf {
        self.dispatcher_logs[id as usize - 1].clone()
    }

    // ------------------------------------------------------------------ dispatchers

    /// Starts node `id` (again) on its port and work_dir.
    pub async fn start_dispatcher(&mut self, id: u64) -> anyhow::Result<()> {
        let i = id as usize - 1;
        self.dispatchers[i] = None;
        self.paused.remove(&id);
        self.dispatchers[i] = Some(Child::start_async(&self.dispatcher_specs[i]).await?);
        Ok(())
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill_dispatcher(&mut self, id: u64) {
        self.dispatchers[id as usize - 1] = None;
        self.paused.remove(&id);
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.dispatchers[id as usize - 1].is_some()
    }

    /// SIGSTOP node `id`.
    pub fn pause_dispatcher(&mut self, id: u64) -> anyhow::Result<()> {
        self.dispatchers[id as usize - 1].as_ref().context("pausing a stopped node")?.pause()?;
        self.paused.insert(id);
        Ok(())
    }

    /// SIGCONT node `id`.
    pub fn resume_dispatcher(&mut self, id: u64) -> anyhow::Result<()> {
        if let Some(c) = &self.dispatchers[id as usize - 1] {
            c.resume()?;
        }
        self.paused.remove(&id);
        Ok(())
    }

    /// Deletes node `id`'s work_dir (local disk only; the node must be stopped).
    pub fn wipe_dispatcher(&mut self, id: u64) -> anyhow::Result<()> {
        if self.config.storage != Storage::LocalDisk {
            bail!("wiping a work_dir is done on local disk only");
        }
        if self.is_running(id) {
            bail!("wiping node {id}'s work_dir while it runs");
        }
        let dir = PathBuf::from(&self.work_dir).join(format!("node-{id}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        Ok(())
    }

    /// Node `id`'s own answer, asked of it alone, within about a second (a paused
    /// node does not answer).
    pub async fn node_status(&self, id: u64) -> Option<ServiceStatus> {
        let probe = &self.probes[id as usize - 1];
        probe.status_of_each().await.pop().and_then(|(_, r)| r.ok())
    }

    /// Every running, unpaused node's own answer, asked at once.
    pub async fn statuses(&self) -> Vec<(u64, Option<ServiceStatus>)> {
        let ids = self.reachable();
        let answers = futures::future::join_all(ids.iter().map(|id| self.node_status(*id))).await;
        ids.into_iter().zip(answers).collect()
    }

    /// The node that leads now: of those (running, not paused) that say they lead,
    /// the one of the highest term. `None` if none does.
    pub async fn current_leader(&self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for (_, status) in self.statuses().await {
            let Some(raft) = status.and_then(|s| s.raft) else { continue };
            let higher = match best {
                Some((term, _)) => raft.term > term,
                None => true,
            };
            if raft.role == "leader" && higher {
                best = Some((raft.term, raft.node_id));
            }
        }
        best.map(|(_, id)| id)
    }

    /// Waits (bounded) for a leader; returns its id.
    pub async fn leader(&self, within: Duration) -> anyhow::Result<u64> {
        let start = Instant::now();
        loop {
            if let Some(id) = self.current_leader().await {
                return Ok(id);
            }
            if start.elapsed() > within {
                bail!("no leader within {within:?}; {}", log_tail(&self.log(1)));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Running, unpaused nodes.
    fn reachable(&self) -> Vec<u64> {
        (1..=NODES).filter(|id| self.is_running(*id) && !self.paused.contains(id)).collect()
    }

    /// Waits (bounded) until a leader exists and every running node has applied what
    /// the leader had applied when this began: the cluster is whole again.
    pub async fn wait_caught_up(&self, within: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        let leader = self.leader(within).await?;
        let target = self
            .node_status(leader)
            .await
            .and_then(|s| s.raft)
            .and_then(|r| r.applied_index)
            .unwrap_or(0);
        for id in self.reachable() {
            loop {
                let applied = self
                    .node_status(id)
                    .await
                    .and_then(|s| s.raft)
                    .and_then(|r| r.applied_index)
                    .unwrap_or(0);
                if applied >= target {
                    break;
                }
                if start.elapsed() > within {
                    bail!("node {id} applied {applied} < {target} after {within:?}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// The leader's status (a linearizable read), waiting (bounded) for one.
    pub async fn leader_status(&self, within: Duration) -> anyhow::Result<ServiceStatus> {
        let start = Instant::now();
        loop {
            if let Some(id) = self.current_leader().await {
                if let Some(s) = self.node_status(id).await.filter(|s| s.from_leader) {
                    return Ok(s);
                }
            }
            if start.elapsed() > within {
                bail!("no status from a leader within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // ------------------------------------------------------------------ network

    /// Sets the mode of both directions between nodes `a` and `b`.
    pub fn set_link(&self, a: u64, b: u64, mode: Mode) {
        for key in [(a, b), (b, a)] {
            if let Some(p) = self.links.get(&key) {
                p.set(mode);
            }
        }
    }

    /// Every link back to `Pass`.
    pub fn heal_links(&self) {
        for p in self.links.values() {
            p.set(Mode::Pass);
        }
    }

    /// Sets the mode of the proxy in front of the S3 server.
    pub fn set_s3(&self, mode: Mode) -> anyhow::Result<()> {
        self.s3.as_ref().context("this cluster's work_dir is not on S3")?.proxy.set(mode);
        Ok(())
    }

    // ------------------------------------------------------------------ workers

    /// Starts worker `w` (again) at its address.
    pub async fn start_worker(&mut self, w: u32) -> anyhow::Result<()> {
        let i = w as usize;
        self.workers[i] = None;
        self.workers[i] = Some(Child::start_async(&self.worker_specs[i]).await?);
        Ok(())
    }

    /// SIGKILLs worker `w` and reaps it.
    pub fn kill_worker(&mut self, w: u32) {
        self.workers[w as usize] = None;
    }

    /// Starts a new worker on a port never used before in this cluster (a
    /// replacement on a new address, as a preempted machine's successor);
    /// returns its number.
    pub async fn add_worker(&mut self) -> anyhow::Result<u32> {
        let w = self.worker_specs.len() as u32;
        let reserved = Port::reserve()?;
        let (spec, log) = worker_spec(&self.config, &self.addresses, reserved.number(), w);
        self.worker_specs.push(spec);
        self.worker_logs.push(log);
        self.worker_addresses.push(reserved.address());
        self._ports.push(reserved);
        self.workers.push(None);
        self.start_worker(w).await?;
        Ok(w)
    }

    /// The address worker `w` serves on (it keeps it across restarts).
    pub fn worker_address(&self, w: u32) -> &str {
        &self.worker_addresses[w as usize]
    }

    /// Workers whose process runs (started by the harness and not killed or drained).
    pub fn running_workers(&self) -> Vec<u32> {
        (0..self.workers.len() as u32).filter(|w| self.workers[*w as usize].is_some()).collect()
    }

    /// SIGTERMs worker `w` (it drains: guarantee P1) and waits, bounded, for it
    /// to exit; returns whether it exited within `within` (if not it is SIGKILLed).
    pub async fn drain_worker(&mut self, w: u32, within: Duration) -> anyhow::Result<bool> {
        let child = self.workers[w as usize].as_mut().context("draining a stopped worker")?;
        child.terminate()?;
        let start = Instant::now();
        while !child.exited() {
            if start.elapsed() > within {
                self.workers[w as usize] = None;
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Exited on the harness's signal: not a crash to report or restart.
        self.workers[w as usize] = None;
        Ok(true)
    }

    /// Waits (bounded) until the leader lists the worker at `address` as
    /// registered and not lost.
    pub async fn wait_worker_registered(
        &self,
        address: &str,
        within: Duration,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let status = self.leader_status(within).await?;
            if status.workers.iter().any(|w| w.address == address && !w.lost) {
                return Ok(());
            }
            if start.elapsed() > within {
                bail!("worker {address} not registered after {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGSTOP (or SIGCONT) every running worker.
    pub fn pause_workers(&self, pause: bool) -> anyhow::Result<()> {
        for w in self.workers.iter().flatten() {
            if pause {
                w.pause()?
            } else {
                w.resume()?
            }
        }
        Ok(())
    }

    /// Waits (bounded) until the leader knows `n` workers.
    pub async fn wait_workers(&self, n: usize, within: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let status = self.leader_status(within).await?;
            if status.workers.len() >= n {
                return Ok(());
            }
            if start.elapsed() > within {
                bail!("{} of {n} workers registered after {within:?}", status.workers.len());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether any child died on its own (not killed by the harness): a crash.
    pub fn crashed(&mut self) -> Vec<String> {
        self.exited().into_iter().map(|(name, _)| name).collect()
    }

    /// Restarts every child that exited on its own, as a process supervisor would
    /// (a dispatcher whose Raft stopped on a fatal error exits, crash-only); returns
    /// each one's name and the end of its log.
    pub async fn restart_crashed(&mut self) -> anyhow::Result<Vec<String>> {
        let exited = self.exited();
        let mut out = vec![];
        for (name, which) in exited {
            let log = match which {
                Exited::Dispatcher(id) => {
                    let log = log_tail(&self.log(id));
                    self.start_dispatcher(id).await?;
                    log
                }
                Exited::Worker(w) => {
                    let log = log_tail(&self.worker_logs[w as usize]);
                    self.start_worker(w).await?;
                    log
                }
            };
            out.push(format!("{name} exited on its own and was restarted; {log}"));
        }
        Ok(out)
    }

    fn exited(&mut self) -> Vec<(String, Exited)> {
        let mut out = vec![];
        for (i, d) in self.dispatchers.iter_mut().enumerate() {
            if d.as_mut().is_some_and(Child::exited) {
                out.push((format!("dispatcher {}", i + 1), Exited::Dispatcher(i as u64 + 1)));
            }
        }
        for (i, w) in self.workers.iter_mut().enumerate() {
            if w.as_mut().is_some_and(Child::exited) {
                out.push((format!("worker {i}"), Exited::Worker(i as u32)));
            }
        }
        out
    }

    /// Where the local work_dirs are (removed when the cluster drops).
    pub fn state_dir(&self) -> &std::path::Path {
        self.state.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Workers first (they would only retry), then the dispatchers; the proxies,
        // the S3 server and the state directory go with the fields.
        self.workers.iter_mut().for_each(|w| *w = None);
        self.dispatchers.iter_mut().for_each(|d| *d = None);
    }
}

enum Exited {
    Dispatcher(u64),
    Worker(u32),
}

/// `sluice worker` number `w` on `port`, and its log file.
fn worker_spec(
    config: &ClusterConfig,
    dispatchers: &[String],
    port: u16,
    w: u32,
) -> (Spec, PathBuf) {
    let args = [
        "worker",
        "--dispatcher",
        &dispatchers.join(","),
        "--port",
        &port.to_string(),
        "--buffer",
        &config.worker_buffer.to_string(),
        "--splits-per-request",
        &config.splits_per_request.to_string(),
        "--timeout-secs",
        &config.worker_timeout_secs.to_string(),
    ];
    let log = config.logs.join(format!("worker-{w}.log"));
    let spec =
        Spec::new(&config.sluice, args).envs([harness_log_env()]).stderr(Stderr::File(log.clone()));
    (spec, log)
}

/// One quick attempt: a paused or dead node must not hold up a probe.
pub fn probe_policy() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(100),
        deadline: Duration::from_millis(1500),
        attempt_timeout: Duration::from_secs(1),
    }
}
