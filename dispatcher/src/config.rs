//! Dispatcher configuration: a plain struct, validated once at start.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_dataset::io::DataRoots;

use crate::access::DispatcherSecurity;
use crate::error::DispatcherError;
use crate::limits::Limits;
use crate::quotas::Quotas;
use sluice_proto::limits::ServerLimits;

#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Source elements per dynamic-sharding split. 1 matches tf.data for `range`;
    /// larger values trade balance for fewer split requests.
    pub elements_per_split: u64,
    /// This node's id in the Raft group.
    pub node_id: u64,
    /// Every voter of the group: node id → `host:port` of its client port (what
    /// clients and workers dial, and leader hints name). Empty: a one-node group
    /// at the listener's address.
    pub peers: BTreeMap<u64, String>,
    /// Every voter's Raft port: node id → `host:port` its RaftPeer service
    /// listens on (its own listener, not the client port). Needed for each peer
    /// in a group of several nodes; [`parse_group`] fills it from `--peers`.
    pub raft_peers: BTreeMap<u64, String>,
    /// TLS, tokens and peer authentication (`access.rs`).
    pub security: DispatcherSecurity,
    /// Where this node sends Raft traffic for a peer, when not to its address in
    /// `raft_peers` (e.g. through a fault-injecting proxy in the chaos suite). Clients
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
    /// Raft timers (defaults: heartbeat 100 ms, election timeout 150..300 ms). A
    /// follower stands for election once it has not heard a leader for
    /// `election_timeout_max` (openraft's leader lease: it refuses to vote for
    /// another before that) plus a timeout drawn from `min..max`, so a dead leader
    /// is replaced within about `2 × max` (450–600 ms with the defaults). A leader
    /// stalled longer than `max + min` (a host under heavy load) loses its
    /// leadership needlessly; raise them there. (110..220 with an earlier
    /// election trigger, issue 33, lost the leader for two minutes in the chaos
    /// suite's S3 scenario on a loaded host.) openraft 0.9 also uses the
    /// heartbeat interval as the deadline of every AppendEntries, entries
    /// included, which a follower answers after its fsync: at 50 ms, fsyncs on a
    /// loaded host missed it, replication failed and the followers elected (the
    /// scale bench: timed-out AppendEntries before its elections, 8 in 20 s).
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
    /// A finished (or garbage-collected) iteration with no consumer this long
    /// is forgotten: dropped from the state with its tasks, and its job with
    /// it when it was the job's last (`apply/forget.rs`), so the state and its
    /// snapshots hold what is in use. Default 1 h. Zero keeps them for ever.
    pub finished_job_ttl: Duration,
    /// A dataset no job uses, not registered again for this long, is
    /// forgotten (`apply/forget.rs`): its id answers NotFound, its quota and
    /// bytes are free. Default 24 h. Zero keeps datasets for ever.
    pub unused_dataset_ttl: Duration,
    /// Also collect DYNAMIC iterations. Off by default (tf.data): a collected
    /// iteration cannot be rejoined, and a new one hands out every split again.
    pub gc_dynamic_jobs: bool,
    /// Caps on what callers can make this dispatcher hold (`limits.rs`):
    /// beyond one, a request gets ResourceExhausted naming it and its flag.
    pub limits: Limits,
    /// Quotas per client identity and the byte cap on dataset definitions
    /// (`quotas.rs`).
    pub quotas: Quotas,
    /// Bounds of the gRPC server (streams per connection, request timeout,
    /// keepalives); see [`DispatcherConfig::server_limits`] for the timeout
    /// actually applied.
    pub server: ServerLimits,
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
            raft_peers: BTreeMap::new(),
            security: DispatcherSecurity::default(),
            raft_dial: BTreeMap::new(),
            work_dir: None,
            snapshot_every: 10_000,
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(150),
            election_timeout_max: Duration::from_millis(300),
            worker_addresses: Vec::new(),
            worker_timeout: Duration::from_secs(10),
            client_timeout: Duration::from_secs(60),
            job_gc_timeout: Duration::from_secs(300),
            gc_dynamic_jobs: false,
            finished_job_ttl: Duration::from_secs(3600),
            unused_dataset_ttl: Duration::from_secs(24 * 3600),
            max_client_wait: Duration::from_secs(1),
            limits: Limits::default(),
            quotas: Quotas::default(),
            server: ServerLimits::default(),
            data_roots: None,
        }
    }
}

impl DispatcherConfig {
    /// How often the leader checks its liveness timers: a quarter of the shortest
    /// enabled timeout, between 20 ms and 1 s (so a timeout fires at most that
    /// much late).
    pub fn liveness_check_interval(&self) -> Duration {
        [
            self.worker_timeout,
            self.client_timeout,
            self.job_gc_timeout,
            self.finished_job_ttl,
            self.unused_dataset_ttl,
        ]
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
        if let Err(e) = self
            .limits
            .validate()
            .and_then(|()| self.quotas.validate())
            .and_then(|()| self.server.validate())
        {
            return bad(e);
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
        if self.peers.len() > 1 {
            if let Some(id) = self.peers.keys().find(|id| !self.raft_peers.contains_key(id)) {
                return bad(format!(
                    "peer {id} has no Raft address; give each peer as ID=HOST:PORT/RAFT_PORT \
                     (see `sluice dispatcher --help`, --peers)"
                ));
            }
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

    /// Secure by default off loopback: refuses a client port on `host` (not
    /// loopback) without TLS and tokens, unless `security.insecure`.
    pub fn check_exposure(&self, host: &str) -> Result<(), DispatcherError> {
        let missing = self.security.missing_on_client_port();
        let insecure = self.security.insecure;
        Ok(sluice_security::require_secure_off_loopback("dispatcher", host, &missing, insecure)?)
    }

    /// [`Self::check_exposure`] for the Raft port: mutual TLS or a peer secret.
    pub fn check_raft_exposure(&self, host: &str) -> Result<(), DispatcherError> {
        let missing = self.security.missing_on_raft_port();
        let insecure = self.security.insecure;
        let what = "dispatcher's Raft listener";
        Ok(sluice_security::require_secure_off_loopback(what, host, &missing, insecure)?)
    }

    /// This node's snapshot interval: `snapshot_every` plus an eighth of it for
    /// each node id after the first (mod 4), so the nodes of a group do not all
    /// snapshot at the same index. Saving a snapshot holds the journal's writer,
    /// and so the log, for as long as it writes (seconds for 30 MiB on a loaded
    /// host, the scale bench): when every node saved at once, no quorum could
    /// append and nothing committed; staggered, two nodes append meanwhile. A
    /// restart replays at most this many entries.
    pub fn snapshot_interval(&self) -> u64 {
        let every = self.snapshot_every;
        every.saturating_add(every / 8 * (self.node_id.saturating_sub(1) % 4))
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

    /// The server bounds as applied: the request timeout is at least the
    /// longest a handler holds a request on purpose (a long poll, up to
    /// `max_client_wait`; a leader read's catch-up or a removal vote, a few
    /// seconds) plus 10 s, so no long poll is cut by it.
    pub fn server_limits(&self) -> ServerLimits {
        let held = self.max_client_wait.max(Duration::from_secs(5));
        let floor = held.saturating_add(Duration::from_secs(10));
        ServerLimits { request_timeout: self.server.request_timeout.max(floor), ..self.server }
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

/// Node id → `host:port`.
pub type Addresses = BTreeMap<u64, String>;

/// The Raft port of a peer given without one: its client port plus this.
pub const DEFAULT_RAFT_PORT_OFFSET: u16 = 1000;

/// A dispatcher group from `--peers`: `ID=HOST:PORT[/RAFT]`, comma-separated,
/// where `RAFT` is the Raft listener's `PORT` (same host) or `HOST:PORT`; without
/// it the Raft port is the client port + [`DEFAULT_RAFT_PORT_OFFSET`]. Returns the
/// client addresses and the Raft addresses by node id.
pub fn parse_group(s: &str) -> Result<(Addresses, Addresses), DispatcherError> {
    let given = parse_peers(s)?;
    let (mut clients, mut rafts) = (BTreeMap::new(), BTreeMap::new());
    for (id, entry) in given {
        let bad = |why: &str| {
            DispatcherError::Config(format!(
                "peer {id} `{entry}`: {why}; give ID=HOST:PORT or ID=HOST:PORT/RAFT_PORT"
            ))
        };
        let (client, raft) = match entry.split_once('/') {
            Some((client, raft)) => (client.to_string(), raft.to_string()),
            None => (entry.clone(), String::new()),
        };
        let (host, port) = client.rsplit_once(':').ok_or_else(|| bad("no :PORT"))?;
        let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
        let raft = if raft.is_empty() {
            let raft_port = port
                .checked_add(DEFAULT_RAFT_PORT_OFFSET)
                .ok_or_else(|| bad("the default Raft port (PORT + 1000) is past 65535"))?;
            format!("{host}:{raft_port}")
        } else if raft.contains(':') {
            raft
        } else {
            raft.parse::<u16>().map_err(|_| bad("the Raft port is not a number"))?;
            format!("{host}:{raft}")
        };
        clients.insert(id, client);
        rafts.insert(id, raft);
    }
    Ok((clients, rafts))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_of_a_group_snapshot_at_different_intervals() {
        let interval = |node_id| {
            DispatcherConfig { node_id, snapshot_every: 1000, ..DispatcherConfig::default() }
                .snapshot_interval()
        };
        assert_eq!([interval(1), interval(2), interval(3)], [1000, 1125, 1250]);
        assert_eq!(interval(5), 1000, "ids past 4 wrap around");
    }

    #[test]
    fn a_group_names_each_raft_port_or_defaults_to_port_plus_1000() {
        let (clients, rafts) =
            parse_group("1=h1:5051/6000,2=h2:5052/r2:7000,3=127.0.0.1:5053").unwrap();
        assert_eq!(clients[&1], "h1:5051");
        assert_eq!(rafts[&1], "h1:6000");
        assert_eq!(rafts[&2], "r2:7000");
        assert_eq!(rafts[&3], "127.0.0.1:6053");
        for bad in ["1=h1:5051/x", "1=h1:65000", "1=h1"] {
            let err = parse_group(bad).unwrap_err().to_string();
            assert!(err.contains("ID=HOST:PORT/RAFT_PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_group_without_raft_addresses_is_refused() {
        let (peers, _) = parse_group("1=127.0.0.1:1,2=127.0.0.1:2").unwrap();
        let config = DispatcherConfig { peers, ..DispatcherConfig::default() };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("no Raft address"), "{err}");
    }
}
