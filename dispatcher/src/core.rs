//! [`Core`]: the one owner of the dispatcher's [`State`], through Raft.
//!
//! Handlers never touch the state directly: they `propose` a [`Command`], which
//! Raft journals, replicates to a quorum and then applies with the pure `apply`;
//! the answer comes back only after that (so nothing is acknowledged that a
//! restart could lose). Reads that decide something go through `read_leader`,
//! which first confirms leadership with a quorum and waits until the local state
//! has applied everything committed, so a new leader never answers from stale
//! state. Followers refuse both with the leader's address.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use openraft::error::{InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, oneshot};

use crate::batcher::{admit, batcher, Proposal, Writer, PROPOSAL_QUEUE};
use crate::command::{Command, Response};
use crate::config::DispatcherConfig;
use crate::counters::Counters;
use crate::error::DispatcherError;
use crate::raft::addresses::client_part;
use crate::raft::bootstrap::{self, VoteGate};
use crate::raft::contacts::PeerContacts;
use crate::raft::leader_heard::{LeaderHeard, SILENT_AFTER_HEARTBEATS};
use crate::raft::log_store::LogStore;
use crate::raft::network::PeerNetwork;
use crate::raft::snapshot_mark::SnapshotMark;
use crate::raft::state_machine::{Shared, StateMachine};
use crate::raft::{NodeId, Raft};
use crate::read_barrier::ReadBarrier;
use crate::state::State;

pub use crate::error::ProposeError;

pub struct Core {
    raft: Raft,
    node_id: NodeId,
    members: BTreeMap<NodeId, String>,
    data: Shared,
    journal: String,
    /// Proposals on their way into a batch (see `batcher`).
    proposals: mpsc::Sender<Proposal>,
    /// Soft state: this process's metric counters (`counters.rs`).
    counters: Counters,
    /// Soft state: shares one leadership confirmation among concurrent leader
    /// reads (`read_barrier.rs`).
    reads: ReadBarrier,
    /// The batcher task: it holds a handle of the Raft node (and so of the
    /// journal) until `proposals` closes; [`Core::close`] waits for it.
    batcher: tokio::task::JoinHandle<()>,
    /// Whether this node answers vote requests (closed while an empty journal's
    /// node decides or rejoins, `raft::bootstrap`).
    votes: VoteGate,
    /// That decision, running in the background; aborted at shutdown.
    bootstrap: Option<tokio::task::JoinHandle<()>>,
    /// Soft state: when each peer last answered this node's Raft RPCs.
    contacts: PeerContacts,
    /// How far the journal's snapshot covers the log (`raft::snapshot_mark`).
    snapshots: SnapshotMark,
    /// Soft state: when a leader was last heard (`raft::leader_heard`), the
    /// heartbeat interval that makes it silent, and the longest a refusal is held.
    heard: LeaderHeard,
    heartbeat: Duration,
    hold: Duration,
}

/// Refuses a journal purged past its snapshot (left so by an earlier build,
/// issue 31) with what to do, where openraft would panic on it at start.
fn check_purge_point(
    journal: &str,
    log: &LogStore,
    sm: &StateMachine,
) -> Result<(), DispatcherError> {
    let covered = sm.shared().read().last_applied;
    match log.last_purged() {
        Some(purged) if covered.is_none_or(|c| purged.index > c.index) => {
            Err(DispatcherError::PurgedPastSnapshot {
                journal: journal.to_string(),
                purged: purged.index,
                covered: covered.map_or("nothing (no snapshot)".into(), |c| c.index.to_string()),
            })
        }
        _ => Ok(()),
    }
}

/// How long a leader read waits for the log to be applied before answering
/// Unavailable (the caller retries).
const READ_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// Attempts of a retryable journal call: ~3 s of doubling backoff, then 2 s
/// apart, about 60 s in all.
const JOURNAL_ATTEMPTS: u32 = 35;

impl Core {
    /// Opens the journal, starts the Raft node and bootstraps the group on its
    /// first start (idempotently: every node proposes the same membership).
    /// `address` is where this node serves, used when `peers` is empty.
    pub async fn start(config: &DispatcherConfig, address: &str) -> Result<Core, DispatcherError> {
        config.validate()?;
        let members = if config.peers.is_empty() {
            BTreeMap::from([(config.node_id, address.to_string())])
        } else {
            config.peers.clone()
        };
        let journal = config.journal_location();
        // Ride out a storage outage of about a minute (backoff 50 ms doubling to
        // 2 s): a failed journal write is fatal to the Raft node, so the retries
        // belong below it.
        let counters = Counters::default();
        let options = sluice_journal::OpenOptions {
            attempts: JOURNAL_ATTEMPTS,
            observer: Some(Arc::new(counters.journal_timing())),
            ..sluice_journal::OpenOptions::default()
        };
        crate::raft::versioned::check_work_dir(&journal, &options).await?;
        let (store, recovery) = sluice_journal::open_with(&journal, &options).await?;
        tracing::info!(%journal, entries = recovery.entries, "journal opened");
        let sm = StateMachine::open(store.clone()).await.map_err(DispatcherError::raft)?;
        let snapshots = sm.snapshot_mark();
        let log = LogStore::open(store).await.map_err(DispatcherError::raft)?;
        let log = log.gated_by(snapshots.clone());
        check_purge_point(&journal, &log, &sm)?;
        let data = sm.shared();
        let raft_config = openraft::Config {
            cluster_name: "sluice".into(),
            heartbeat_interval: config.heartbeat_interval.as_millis() as u64,
            election_timeout_min: config.election_timeout_min.as_millis() as u64,
            election_timeout_max: config.election_timeout_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_interval()),
            // Keep a little log after a snapshot so a briefly lagging follower
            // catches up from the log rather than by a full snapshot; little,
            // because every kept entry is replayed (and on object stores, read as
            // its own segment) at restart.
            max_in_snapshot_log_to_keep: (config.snapshot_every / 10).clamp(1, 1000),
            ..Default::default()
        }
        .validate()
        .map_err(DispatcherError::raft)?;
        let mut dial = config.raft_peers.clone();
        dial.extend(config.raft_dial.clone());
        let security = config.security.peer_client()?;
        let contacts = PeerContacts::default();
        let network = PeerNetwork {
            dial: dial.clone(),
            security: security.clone(),
            contacts: contacts.clone(),
            channels: Default::default(),
        };
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log, sm)
            .await
            .map_err(DispatcherError::raft)?;
        let mut votes = VoteGate::new(true);
        let mut bootstrap = None;
        if !raft.is_initialized().await.map_err(DispatcherError::raft)? {
            if members.len() == 1 {
                let nodes: BTreeMap<NodeId, BasicNode> =
                    members.iter().map(|(id, a)| (*id, BasicNode::new(a))).collect();
                match raft.initialize(nodes).await {
                    Ok(()) => tracing::info!(?members, "raft group bootstrapped"),
                    Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                    Err(e) => return Err(DispatcherError::raft(e)),
                }
            } else {
                // New group or wiped node: decided with the peers once this node
                // serves (they ask it too); no vote meanwhile.
                votes = VoteGate::new(false);
                let peers = bootstrap::Peers {
                    me: config.node_id,
                    my_address: members.get(&config.node_id).cloned().unwrap_or_default(),
                    members: members.clone(),
                    dial,
                    security,
                };
                bootstrap = Some(tokio::spawn(bootstrap::run(raft.clone(), peers, votes.clone())));
            }
        }
        let (proposals, rx) = mpsc::channel(PROPOSAL_QUEUE);
        let writer = Writer {
            raft: raft.clone(),
            node_id: config.node_id,
            members: members.clone(),
            commit_latency: counters.raft_commit(),
            batch_sizes: counters.raft_batch(),
        };
        let batcher = tokio::spawn(batcher(writer, rx));
        let heard = LeaderHeard::default();
        Ok(Core {
            raft,
            node_id: config.node_id,
            members,
            data,
            journal,
            proposals,
            counters,
            reads: ReadBarrier::default(),
            batcher,
            votes,
            bootstrap,
            contacts,
            snapshots,
            heard,
            heartbeat: config.heartbeat_interval,
            // A lease, an election timeout, and a round of votes.
            hold: 2 * config.election_timeout_max + config.heartbeat_interval,
        })
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Replicates and applies `cmd` (batched with concurrent proposals); answers
    /// once it is committed and applied.
    ///
    /// A command over the entry cap (`MAX_ENTRY_BYTES` encoded) is refused here,
    /// with ResourceExhausted naming its size and the cap: proposed, it would
    /// make an AppendEntries no peer accepts, retried for ever while nothing
    /// commits. A `Batch` is the batcher's to make and is refused too.
    pub async fn propose(&self, cmd: Command) -> Result<Response, ProposeError> {
        let name = cmd.name();
        self.counters.proposed(name);
        // The term the write was proposed in (its fields are read only when the
        // span is enabled: logs at debug, or traces exported).
        let span = tracing::debug_span!(
            "propose",
            command = name,
            term = self.raft.metrics().borrow().current_term,
            node_id = self.node_id,
        );
        let result = match admit(&cmd) {
            Ok(bytes) => self.submit(cmd, bytes).instrument(span).await,
            Err(e) => Err(ProposeError::Rejected(e)),
        };
        let result = match result {
            Err(e @ ProposeError::NotLeader { .. }) => Err(self.held(e).await),
            r => r,
        };
        if let Err(e) = &result {
            self.counters.failed(name, e);
        }
        if let Err(ProposeError::Rejected(e)) = &result {
            tracing::debug!(command = name, error = %e, "command refused");
        }
        result
    }

    async fn submit(&self, cmd: Command, bytes: u64) -> Result<Response, ProposeError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || ProposeError::Unavailable("the dispatcher is stopping".into());
        match self.proposals.send(Proposal { cmd, bytes, reply }).await {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(stopped())),
            Err(_) => Err(stopped()),
        }
    }

    /// This process's metric counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Runs `f` on the state as of now, on the leader only (linearizable).
    ///
    /// Besides openraft's leadership check, it waits until every entry that was in
    /// this node's log when the read began is applied: a node restarting with a
    /// committed vote for itself resumes as leader before it has re-applied its
    /// log (the commit index is not persisted), and must not answer from its
    /// snapshot meanwhile (found by the chaos suite: s3 seed 725556).
    ///
    /// Concurrent reads share one leadership confirmation (`read_barrier.rs`):
    /// however many long polls wait, at most one quorum round is in flight.
    pub async fn read_leader<R>(&self, f: impl FnOnce(&State) -> R) -> Result<R, ProposeError> {
        self.read_leader_at(|s, _| f(s)).await
    }

    /// [`Core::read_leader`], with the views generation of the state read
    /// (`Shared::generation`).
    pub(crate) async fn read_leader_at<R>(
        &self,
        f: impl FnOnce(&State, u64) -> R,
    ) -> Result<R, ProposeError> {
        let in_log = self.raft.metrics().borrow().last_log_index;
        let confirmed = match self.reads.confirm(|| self.confirm_leadership()).await {
            Ok(confirmed) => confirmed,
            Err(e) => return Err(self.held(e).await),
        };
        let needed = in_log.max(Some(confirmed));
        if tokio::time::timeout(READ_CATCH_UP, self.applied_at_least(needed)).await.is_err() {
            return Err(ProposeError::Unavailable(format!(
                "the leader is still applying its log (index {needed:?} not applied within \
                 {READ_CATCH_UP:?}); retry shortly"
            )));
        }
        Ok(self.read_local_at(f))
    }

    /// Waits until this node's state has applied `index` (at once for `None`).
    ///
    /// Checked on the state itself, woken by its `applied` watch: openraft's
    /// `Raft::wait` copies the whole `RaftMetrics` per check, and a busy leader
    /// nearly always has an entry in flight when a read begins, so every long
    /// poll waited that way (~1 % of the leader's CPU at 2,000 + 2,000).
    async fn applied_at_least(&self, index: Option<u64>) {
        // Subscribed before the check: an apply between the two still wakes it.
        let mut applied = self.data.applied();
        while self.data.read().last_applied.map(|l| l.index) < index {
            if applied.changed().await.is_err() {
                // The state machine is gone (shutting down): the caller's
                // timeout answers.
                std::future::pending::<()>().await;
            }
        }
    }

    /// One leadership confirmation with a quorum (openraft's read index): the
    /// committed index it confirmed, once applied here.
    async fn confirm_leadership(&self) -> Result<u64, ProposeError> {
        match self.raft.ensure_linearizable().await {
            Ok(read_log_id) => Ok(read_log_id.map_or(0, |l| l.index)),
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(fw))) => {
                Err(self.not_leader(fw.leader_id))
            }
            Err(e) => Err(ProposeError::Unavailable(e.to_string())),
        }
    }

    /// Leadership confirmations this node ran for its leader reads.
    pub fn leader_confirmations(&self) -> u64 {
        self.reads.rounds_run()
    }

    /// Runs `f` on this node's state, whatever its role (for status, and for a
    /// long poll after its `read_leader`).
    pub fn read_local<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.data.read().state)
    }

    /// [`Core::read_local`], with the views generation of the state read.
    pub(crate) fn read_local_at<R>(&self, f: impl FnOnce(&State, u64) -> R) -> R {
        let d = self.data.read();
        f(&d.state, self.data.generation(&d))
    }

    /// Marks a change of what a heartbeat may answer (`Command::may_change_views`):
    /// the views generation, published after each applied batch that may change
    /// one, and after an installed snapshot. The long polls wait on it.
    pub fn views(&self) -> tokio::sync::watch::Receiver<u64> {
        self.data.views()
    }

    /// Marks a change of the applied state: the last applied log index, published
    /// after each applied batch of entries or installed snapshot (no polling).
    pub fn applied(&self) -> tokio::sync::watch::Receiver<u64> {
        self.data.applied()
    }

    /// A refusal because this node is not the leader, held while there is no
    /// live leader to name (`raft::leader_heard`): answered as soon as the group
    /// names another leader or the leader is heard again, and at the latest
    /// after `hold`, then naming no leader rather than a silent one (a client
    /// would only find it down). Any other error passes at once.
    ///
    /// The leader counts as silent when it has not been heard for two
    /// heartbeats, or, when the call's client reported it down
    /// (`leader_down`), since the call arrived.
    async fn held(&self, e: ProposeError) -> ProposeError {
        let ProposeError::NotLeader { leader_id: named, leader_address, .. } = &e else {
            return e;
        };
        let named = *named;
        let began = std::time::Instant::now();
        let reported = leader_address.as_deref().is_some_and(crate::leader_down::reported_down);
        let silent = || {
            self.heard.silent_for().is_none_or(|s| {
                s >= self.heartbeat * SILENT_AFTER_HEARTBEATS || (reported && s >= began.elapsed())
            })
        };
        if named.is_some() && !silent() {
            return e;
        }
        let deadline = tokio::time::Instant::now() + self.hold;
        let mut metrics = self.raft.metrics();
        loop {
            let current = metrics.borrow_and_update().current_leader;
            let named_anew = current.is_some() && current != named;
            let now = tokio::time::Instant::now();
            if named_anew || (current.is_some() && !silent()) {
                return self.not_leader(current);
            }
            if now >= deadline {
                return self.not_leader(current.filter(|_| !silent()));
            }
            // Woken by a change of leader; a heartbeat heard is seen at the tick.
            let tick = self.heartbeat.min(deadline - now);
            if let Ok(Err(_)) = tokio::time::timeout(tick, metrics.changed()).await {
                return self.not_leader(current); // Raft stopped.
            }
        }
    }

    /// What the Raft peer service tells of each AppendEntries from a leader.
    pub(crate) fn leader_heard(&self) -> LeaderHeard {
        self.heard.clone()
    }

    fn not_leader(&self, leader_id: Option<NodeId>) -> ProposeError {
        ProposeError::NotLeader {
            node_id: self.node_id,
            leader_id,
            leader_address: leader_id.and_then(|l| {
                crate::raft::addresses::client_address_of(&self.raft, &self.members, l)
            }),
        }
    }

    /// This node's view of the group, for `GetStatus`.
    pub fn raft_status(&self) -> pb::RaftStatus {
        let m = self.raft.metrics().borrow().clone();
        let role = match m.state {
            openraft::ServerState::Leader => "leader",
            openraft::ServerState::Follower => "follower",
            openraft::ServerState::Candidate => "candidate",
            openraft::ServerState::Learner => "learner",
            openraft::ServerState::Shutdown => "shutdown",
        };
        let members: std::collections::HashMap<u64, String> = m
            .membership_config
            .nodes()
            .map(|(id, n)| (*id, client_part(&n.addr).to_string()))
            .collect();
        pb::RaftStatus {
            node_id: self.node_id,
            role: role.into(),
            term: m.current_term,
            leader_id: m.current_leader,
            leader_address: m
                .current_leader
                .and_then(|l| members.get(&l).cloned())
                .unwrap_or_default(),
            last_log_index: m.last_log_index,
            applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            journal: self.journal.clone(),
            members,
        }
    }

    /// When each peer last answered this node's Raft RPCs (soft state).
    pub(crate) fn contacts(&self) -> &PeerContacts {
        &self.contacts
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.node_id)
    }

    /// Resolves when the Raft node has stopped on its own (a fatal storage or
    /// internal error), with the reason. It never resolves while Raft runs.
    pub async fn raft_stopped(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(e) = &metrics.borrow().running_state {
                return e.to_string();
            }
            if metrics.changed().await.is_err() {
                return "the raft node stopped".into();
            }
        }
    }

    /// Whether this node answers vote requests (see `raft::bootstrap`).
    pub(crate) fn vote_gate(&self) -> VoteGate {
        self.votes.clone()
    }

    pub(crate) fn snapshot_mark(&self) -> SnapshotMark {
        self.snapshots.clone()
    }

    /// Stops the Raft node (its background tasks end).
    pub async fn shutdown(&self) {
        if let Some(task) = &self.bootstrap {
            task.abort();
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }

    /// After [`Core::shutdown`], by the last holder: drops the Raft node and
    /// waits until the batcher, the other holder of it, has ended, so the journal
    /// is closed when this returns (a dispatcher restarted in the same process
    /// can open it again).
    pub async fn close(self) {
        let Core { raft, proposals, batcher, bootstrap, .. } = self;
        drop(proposals);
        drop(raft);
        if let Some(task) = bootstrap {
            task.abort();
            let _ = task.await;
        }
        let _ = batcher.await;
    }
}
