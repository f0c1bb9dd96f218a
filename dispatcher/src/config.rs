//! Dispatcher configuration: a plain struct, validated once at start.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_dataset::io::DataRoots;

use crate::error::DispatcherError;

#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Source elements per dynamic-sharding split. 1 matches tf.data for `range`;
    /// larger values trade balance for fewer split requests.
    pub elements_per_split: u64,
    /// This node's id in the Raft group.
    pub node_id: u64,
    /// Every voter of the group: node id → `host:port` it serves on (clients and
    /// peers alike). Empty: a one-node group at the listener's address.
    pub peers: BTreeMap<u64, String>,
    /// Where this node sends Raft traffic for a peer, when not to its address in
    /// `peers` (e.g. through a fault-injecting proxy in the chaos suite). Clients
    /// are still told the `peers` addresses.
    pub raft_dial: BTreeMap<u64, String>,
    /// Where to journal: `None` keeps everything in memory (nothing survives a
    /// restart); a path journals to sled there; `file://`, `s3://`, `gs://` and
    /// `memory://` URLs journal through object storage. Each node uses
    /// `<work_dir>/node-<id>`.
    pub work_dir: Option<String>,
    /// Log entries between snapshots; the log before a snapshot is purged, so a
    /// restart replays at most about this many entries. See
    /// [`DispatcherConfig::default_snapshot_every`].
    pub snapshot_every: u64,
    /// Raft timers (defaults: heartbeat 50 ms, election timeout 150..300 ms). A
    /// follower stands for election once it has not heard a leader for
    /// `election_timeout_max` (openraft's leader lease: it refuses to vote for
    /// another before that) plus a timeout drawn from `min..max`, so a dead leader
    /// is replaced within about `2 × max` (450–600 ms with the defaults). A leader
    /// stalled longer than `max + min` (a host under heavy load) loses its
    /// leadership needlessly; raise them there.
    pub heartbeat_interval: Duration,
    pub election_timeout_min: Duration,
    pub election_timeout_max: Duration,
    /// The fixed worker list of static sharding (FILE, DATA, FILE_OR_DATA, HINT):
    /// worker `i` reads shard `i`. When non-empty, only these addresses may register.
    /// Give every dispatcher of a group the same list.
    pub worker_addresses: Vec<String>,
    /// Liveness (leader timers, `liveness.rs`): a worker silent this long is
    /// declared lost and its unfinished tasks are ended. Default 10 s: 20 worker
    /// heartbeat intervals (500 ms; a heartbeat the leader holds as a long poll is
    /// read, and counts, at least that often), far above a leader failover (timers
    /// restart at a new leader anyway), and well below the readers' 30–60 s retry
    /// deadline on a worker, so readers of a dead worker's task are released by
    /// the dispatcher before they give up on it. Zero disables it.
    pub worker_timeout: Duration,
    /// A consumer silent this long is released (its client id freed). Default
    /// 60 s: a consumer keeps one `ClientHeartbeat` long poll outstanding, held at
    /// most `max_client_wait` (1 s) and counted at every read, so that is some 60
    /// polls (a coordinated consumer, which does not long-poll, heartbeats every
    /// 100 ms); a trainer paused longer than that (e.g. a long checkpoint) must
    /// rejoin. Zero disables it.
    pub client_timeout: Duration,
    /// An unfinished iteration with no consumer this long is garbage-collected.
    /// Default 5 min (tf.data). Zero disables GC.
    pub job_gc_timeout: Duration,
    /// The longest a `ClientHeartbeat` long poll waits for the consumer's view to
    /// change (also at most a quarter of `client_timeout`). Default 1 s: an idle
    /// consumer costs one call a second; the end of an iteration reaches it as
    /// soon as it is applied. Zero: answer at once (consumers poll).
    pub max_client_wait: Duration,
    /// Also collect DYNAMIC iterations. Off by default (tf.data): a collected
    /// iteration cannot be rejoined, and a new one hands out every split again.
    pub gc_dynamic_jobs: bool,
    /// The files and objects a registered spec may name (`sluice dispatcher
    /// --data-roots`): a spec naming anything else is refused at registration.
    /// `None`: the defaults for the listen address ([`DataRoots::defaults`]: the
    /// current and temp directories on loopback, nothing elsewhere).
    pub data_roots: Option<DataRoots>,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            elements_per_split: 1,
            node_id: 1,
            peers: BTreeMap::new(),
            raft_dial: BTreeMap::new(),
            work_dir: None,
            snapshot_every: 10_000,
            heartbeat_interval: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(150),
            election_timeout_max: Duration::from_millis(300),
            worker_addresses: Vec::new(),
            worker_timeout: Duration::from_secs(10),
            client_timeout: Duration::from_secs(60),
            job_gc_timeout: Duration::from_secs(300),
            gc_dynamic_jobs: false,
            max_client_wait: Duration::from_secs(1),
            data_roots: None,
        }
    }
}

impl DispatcherConfig {
    /// How often the leader checks its liveness timers: a quarter of the shortest
    /// enabled timeout, between 20 ms and 1 s (so a timeout fires at most that
    /// much late).
    pub fn liveness_check_interval(&self) -> Duration {
        [self.worker_timeout, self.client_timeout, self.job_gc_timeout]
            .into_iter()
            .filter(|t| !t.is_zero())
            .min()
            .map(|t| t / 4)
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(20), Duration::from_secs(1))
    }

    pub fn validate(&self) -> Result<(), DispatcherError> {
        let bad = |m: String| Err(DispatcherError::Config(m));
        if self.elements_per_split == 0 {
            return bad("elements_per_split must be at least 1".into());
        }
        if self.snapshot_every == 0 {
            return bad("snapshot_every must be at least 1".into());
        }
        if !self.peers.is_empty() && !self.peers.contains_key(&self.node_id) {
            let ids: Vec<String> = self.peers.keys().map(|k| k.to_string()).collect();
            return bad(format!(
                "node id {} is not among the peers ({}); give --node-id one of them",
                self.node_id,
                ids.join(", ")
            ));
        }
        if let Some(id) = self.raft_dial.keys().find(|id| !self.peers.contains_key(id)) {
            return bad(format!("raft_dial names node {id}, which is not among the peers"));
        }
        if let Some((id, _)) = self.peers.iter().find(|(_, a)| a.is_empty()) {
            return bad(format!("peer {id} has an empty address"));
        }
        if self.worker_addresses.iter().any(|a| a.trim().is_empty()) {
            return bad("worker_addresses: an address is empty".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(a) = self.worker_addresses.iter().find(|a| !seen.insert(a.as_str())) {
            return bad(format!(
                "worker_addresses: `{a}` is given twice; each worker reads one shard"
            ));
        }
        if self.election_timeout_min <= self.heartbeat_interval
            || self.election_timeout_max <= self.election_timeout_min
        {
            return bad(format!(
                "need heartbeat_interval ({:?}) < election_timeout_min ({:?}) < \
                 election_timeout_max ({:?}); set them with `sluice dispatcher \
                 --raft-heartbeat-ms H --election-timeout-ms MIN..MAX`",
                self.heartbeat_interval, self.election_timeout_min, self.election_timeout_max
            ));
        }
        Ok(())
    }

    /// The default snapshot interval for a work_dir: 10,000 entries on local disk
    /// or in memory; 1,000 on object storage, where a restart reads every segment
    /// written since the last purge (a few ms each), so fewer entries between
    /// snapshots keep restarts short.
    pub fn default_snapshot_every(work_dir: Option<&str>) -> u64 {
        match work_dir {
            Some(u) if u.contains("://") && !u.starts_with("memory://") => 1_000,
            _ => 10_000,
        }
    }

    /// The data roots this node enforces, listening on `address`.
    pub fn data_roots_at(&self, address: &std::net::SocketAddr) -> DataRoots {
        self.data_roots.clone().unwrap_or_else(|| DataRoots::defaults(address.ip().is_loopback()))
    }

    /// Where node `node_id` journals, from `work_dir`.
    pub fn journal_location(&self) -> String {
        let node = format!("node-{}", self.node_id);
        match &self.work_dir {
            None => {
                use std::sync::atomic::{AtomicU64, Ordering};
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                format!("memory://sluice-{}-{n}/{node}", std::process::id())
            }
            Some(url) if url.contains("://") => format!("{}/{node}", url.trim_end_matches('/')),
            Some(path) => std::path::Path::new(path).join(node).to_string_lossy().into_owned(),
        }
    }
}

/// Parses `1=host:port,2=host:port,…`.
pub fn parse_peers(s: &str) -> Result<BTreeMap<u64, String>, DispatcherError> {
    let mut peers = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| DispatcherError::Config(format!("peer `{part}` is not ID=HOST:PORT")))?;
        let id: u64 = id.trim().parse().map_err(|_| {
            DispatcherError::Config(format!("peer `{part}`: `{id}` is not a numeric node id"))
        })?;
        if peers.insert(id, addr.trim().to_string()).is_some() {
            return Err(DispatcherError::Config(format!("peer id {id} is given twice")));
        }
    }
    Ok(peers)
}
