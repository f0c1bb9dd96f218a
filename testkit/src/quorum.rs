//! A Raft quorum of `sluice dispatcher` processes on 127.0.0.1: node `id` (1..=N)
//! runs `sluice dispatcher --node-id ID --peers 1=A/RA,2=B/RB,… --work-dir W ARGS`,
//! each journaling to `W/node-<id>`; `A` is a node's client port, `RA` its Raft
//! port ([`Quorum::raft_addresses`]).
//!
//! Every node's ports are reserved ([`Port`]) for the quorum's life, so a node that
//! is killed comes back on the same address and state with [`Quorum::start_node`],
//! and nothing else can take the port meanwhile. [`Quorum::leader`] asks every node
//! for its status (one `GetStatus` each, with a short timeout) until one says it
//! leads, up to a deadline; the error lists each node's role and quotes node 1's
//! stderr.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_proto::v1 as pb;
use tonic::transport::Endpoint;

use crate::{Child, Error, Port, Spec, Stderr, START_TIMEOUT};

/// A node that does not answer `GetStatus` within this is `unreachable`.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// `sluice dispatcher --peers` for nodes 1..=N with these client and Raft
/// addresses: `1=A/RA,2=B/RB,…`.
pub fn group_flag(addresses: &[String], raft_addresses: &[String]) -> String {
    let peers: Vec<String> = addresses
        .iter()
        .zip(raft_addresses)
        .enumerate()
        .map(|(i, (a, r))| format!("{}={a}/{r}", i + 1))
        .collect();
    peers.join(",")
}

/// What to start.
#[derive(Clone, Debug)]
pub struct QuorumConfig {
    /// The `sluice` executable.
    pub exe: PathBuf,
    pub nodes: usize,
    /// `--work-dir` (a directory or a URL) shared by the nodes.
    pub work_dir: String,
    /// Flags after `--node-id`, `--peers` and `--work-dir`, for every node.
    pub args: Vec<String>,
    /// Added to every node's environment.
    pub envs: Vec<(String, String)>,
    /// Each node's stderr goes to `<log_dir>/<log_prefix>node-<id>.log` (appended
    /// across restarts); with `None`, to an in-memory tail echoed with `eprintln!`.
    pub log_dir: Option<PathBuf>,
    pub log_prefix: String,
}

impl QuorumConfig {
    /// `nodes` nodes on `work_dir`, no extra flags, stderr to an in-memory tail.
    pub fn new(exe: impl Into<PathBuf>, nodes: usize, work_dir: &str) -> QuorumConfig {
        QuorumConfig {
            exe: exe.into(),
            nodes,
            work_dir: work_dir.to_string(),
            args: vec![],
            envs: vec![],
            log_dir: None,
            log_prefix: String::new(),
        }
    }
}

/// The running quorum; every node is killed and reaped when it drops.
pub struct Quorum {
    addresses: Vec<String>,
    raft_addresses: Vec<String>,
    specs: Vec<Spec>,
    /// Before `_ports`: fields drop in order, so no port is released while a
    /// node still listens on it.
    nodes: Vec<Option<Child>>,
    _ports: Vec<Port>,
}

impl Quorum {
    /// Reserves the ports and starts every node, each waited for until it listens.
    /// Blocking; from async code use [`Quorum::start_async`].
    pub fn start(config: QuorumConfig) -> Result<Quorum, Error> {
        let mut quorum = Quorum::prepare(config)?;
        for id in 1..=quorum.nodes.len() as u64 {
            quorum.start_node(id)?;
        }
        Ok(quorum)
    }

    /// [`Quorum::start`] without blocking the runtime.
    pub async fn start_async(config: QuorumConfig) -> Result<Quorum, Error> {
        let mut quorum = Quorum::prepare(config)?;
        for id in 1..=quorum.nodes.len() as u64 {
            quorum.start_node_async(id).await?;
        }
        Ok(quorum)
    }

    fn prepare(config: QuorumConfig) -> Result<Quorum, Error> {
        // Client ports first, then Raft ports.
        let ports = Port::reserve_n(2 * config.nodes)?;
        let addresses: Vec<String> = ports[..config.nodes].iter().map(Port::address).collect();
        let raft_addresses: Vec<String> = ports[config.nodes..].iter().map(Port::address).collect();
        let peers = group_flag(&addresses, &raft_addresses);
        let specs = (1..=config.nodes)
            .map(|id| {
                let id = id.to_string();
                let head = ["dispatcher", "--node-id", &id, "--peers", &peers, "--work-dir"];
                let mut args: Vec<String> = head.iter().map(|s| s.to_string()).collect();
                args.push(config.work_dir.clone());
                args.extend(config.args.iter().cloned());
                let stderr = match &config.log_dir {
                    Some(dir) => {
                        Stderr::File(dir.join(format!("{}node-{id}.log", config.log_prefix)))
                    }
                    None => Stderr::Tail { echo: true },
                };
                Spec::new(&config.exe, args).envs(config.envs.iter().cloned()).stderr(stderr)
            })
            .collect();
        let nodes = (0..config.nodes).map(|_| None).collect();
        Ok(Quorum { addresses, raft_addresses, specs, nodes, _ports: ports })
    }

    fn index(&self, id: u64) -> Result<usize, Error> {
        let i = (id as usize).wrapping_sub(1);
        if i < self.nodes.len() {
            Ok(i)
        } else {
            Err(Error::Usage(format!("no node {id} in a quorum of {}", self.nodes.len())))
        }
    }

    /// Starts node `id` (again, killing a running one first) on its port and
    /// work_dir; returns once it listens. Blocking.
    pub fn start_node(&mut self, id: u64) -> Result<&Child, Error> {
        let i = self.index(id)?;
        self.nodes[i] = None;
        let child = Child::start(&self.specs[i])?;
        Ok(self.nodes[i].insert(child))
    }

    /// [`Quorum::start_node`] without blocking the runtime.
    pub async fn start_node_async(&mut self, id: u64) -> Result<&Child, Error> {
        let i = self.index(id)?;
        self.nodes[i] = None;
        let child = Child::start_async(&self.specs[i]).await?;
        Ok(self.nodes[i].insert(child))
    }

    /// SIGKILLs node `id` and reaps it; returns the instant just before the signal
    /// (`None` if it was not running).
    pub fn kill(&mut self, id: u64) -> Option<Instant> {
        let i = self.index(id).ok()?;
        let mut child = self.nodes[i].take()?;
        let at = Instant::now();
        child.kill();
        Some(at)
    }

    /// Takes node `id`'s running process out of the quorum (to stop it gracefully
    /// with [`Child::terminate`]; [`Quorum::start_node`] starts it again).
    pub fn take(&mut self, id: u64) -> Option<Child> {
        let i = self.index(id).ok()?;
        self.nodes[i].take()
    }

    /// Node `id`, if running.
    pub fn node(&self, id: u64) -> Option<&Child> {
        self.nodes.get((id as usize).wrapping_sub(1))?.as_ref()
    }

    /// Node addresses, node `id` at index `id - 1`.
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Every node's Raft port, in node order (node 1 first).
    pub fn raft_addresses(&self) -> &[String] {
        &self.raft_addresses
    }

    /// Node `id`'s address. Panics for an id outside the quorum.
    pub fn address(&self, id: u64) -> &str {
        &self.addresses[id as usize - 1]
    }

    /// Node `id`'s log file, if its stderr goes to one.
    pub fn log(&self, id: u64) -> Option<&Path> {
        match &self.specs.get((id as usize).wrapping_sub(1))?.stderr {
            Stderr::File(path) => Some(path),
            Stderr::Tail { .. } => None,
        }
    }

    /// Waits (up to [`START_TIMEOUT`]) until a node says it leads; returns its id.
    pub async fn leader(&self) -> Result<u64, Error> {
        self.leader_within(START_TIMEOUT).await
    }

    /// [`Quorum::leader`] with another deadline.
    pub async fn leader_within(&self, within: Duration) -> Result<u64, Error> {
        let mut clients = vec![];
        for address in &self.addresses {
            let endpoint = Endpoint::from_shared(format!("http://{address}"))
                .map_err(|e| Error::Usage(format!("address {address}: {e}")))?
                .connect_timeout(STATUS_TIMEOUT)
                .timeout(STATUS_TIMEOUT);
            clients.push(pb::dispatcher_client::DispatcherClient::new(endpoint.connect_lazy()));
        }
        let start = Instant::now();
        loop {
            let mut roles = BTreeMap::new();
            for (address, client) in self.addresses.iter().zip(&clients) {
                let answer = tokio::time::timeout(
                    STATUS_TIMEOUT,
                    client.clone().get_status(pb::GetStatusRequest {}),
                )
                .await;
                match answer.ok().and_then(Result::ok).and_then(|r| r.into_inner().raft) {
                    Some(raft) if raft.role == "leader" => return Ok(raft.node_id),
                    Some(raft) => roles.insert(address.clone(), raft.role),
                    None => roles.insert(address.clone(), "unreachable".into()),
                };
            }
            if start.elapsed() > within {
                let stderr = match self.node(1) {
                    Some(node) => node.stderr_tail(),
                    None => self.log(1).map(crate::log_tail).unwrap_or_default(),
                };
                return Err(Error::NoLeader { within, roles, stderr });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills every node (also done on drop).
    pub fn stop(&mut self) {
        self.nodes.iter_mut().for_each(|n| *n = None);
    }
}
