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

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use sluice_proto::v1 as pb;

use crate::command::{Command, Response};
use crate::config::DispatcherConfig;
use crate::error::{DispatcherError, StateError};
use crate::raft::log_store::LogStore;
use crate::raft::network::PeerNetwork;
use crate::raft::state_machine::{Shared, StateMachine};
use crate::raft::{NodeId, Raft};
use crate::state::State;

/// Why a proposal or a leader read was not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// The state machine refused the command; the state is unchanged.
    Rejected(StateError),
    /// This node is not the leader; try the leader (if one is known).
    NotLeader { node_id: NodeId, leader_id: Option<NodeId>, leader_address: Option<String> },
    /// Raft cannot serve now (shutting down, storage failure); try again or elsewhere.
    Unavailable(String),
}

impl From<StateError> for ProposeError {
    fn from(e: StateError) -> Self {
        ProposeError::Rejected(e)
    }
}

pub struct Core {
    raft: Raft,
    node_id: NodeId,
    members: BTreeMap<NodeId, String>,
    data: Shared,
    journal: String,
}

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
        let (store, recovery) = sluice_journal::open(&journal).await?;
        if let Some(cut) = &recovery.truncated_tail {
            tracing::warn!(%journal, "journal had a torn tail, truncated: {cut}");
        }
        tracing::info!(%journal, entries = recovery.entries, "journal opened");
        let log = LogStore::open(store.clone()).await.map_err(DispatcherError::raft)?;
        let sm = StateMachine::open(store).await.map_err(DispatcherError::raft)?;
        let data = sm.shared();
        let raft_config = openraft::Config {
            cluster_name: "sluice".into(),
            heartbeat_interval: config.heartbeat_interval.as_millis() as u64,
            election_timeout_min: config.election_timeout_min.as_millis() as u64,
            election_timeout_max: config.election_timeout_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            // Keep a little log after a snapshot so a briefly lagging follower
            // catches up from the log rather than by a full snapshot; little,
            // because every kept entry is replayed (and on object stores, read as
            // its own segment) at restart.
            max_in_snapshot_log_to_keep: (config.snapshot_every / 10).clamp(1, 1000),
            ..Default::default()
        }
        .validate()
        .map_err(DispatcherError::raft)?;
        let network = PeerNetwork { dial: config.raft_dial.clone() };
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log, sm)
            .await
            .map_err(DispatcherError::raft)?;
        if !raft.is_initialized().await.map_err(DispatcherError::raft)? {
            let nodes: BTreeMap<NodeId, BasicNode> =
                members.iter().map(|(id, a)| (*id, BasicNode::new(a))).collect();
            match raft.initialize(nodes).await {
                Ok(()) => tracing::info!(?members, "raft group bootstrapped"),
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(DispatcherError::raft(e)),
            }
        }
        Ok(Core { raft, node_id: config.node_id, members, data, journal })
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Replicates and applies `cmd`; answers once it is committed and applied.
    pub async fn propose(&self, cmd: Command) -> Result<Response, ProposeError> {
        let name = cmd.name();
        match self.raft.client_write(cmd).await {
            Ok(resp) => match resp.data {
                Some(Ok(r)) => Ok(r),
                Some(Err(e)) => {
                    tracing::debug!(command = name, error = %e, "command refused");
                    Err(ProposeError::Rejected(e))
                }
                None => Err(ProposeError::Unavailable(format!("{name}: no answer from apply"))),
            },
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(self.not_leader(f.leader_id))
            }
            Err(e) => Err(ProposeError::Unavailable(format!("{name}: {e}"))),
        }
    }

    /// Runs `f` on the state as of now, on the leader only (linearizable).
    pub async fn read_leader<R>(&self, f: impl FnOnce(&State) -> R) -> Result<R, ProposeError> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(f(&self.data.read().state)),
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(fw))) => {
                Err(self.not_leader(fw.leader_id))
            }
            Err(e) => Err(ProposeError::Unavailable(e.to_string())),
        }
    }

    /// Runs `f` on this node's state, whatever its role (for status only).
    pub fn read_local<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.data.read().state)
    }

    fn not_leader(&self, leader_id: Option<NodeId>) -> ProposeError {
        ProposeError::NotLeader {
            node_id: self.node_id,
            leader_id,
            leader_address: leader_id.and_then(|l| self.members.get(&l).cloned()),
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
        let members: std::collections::HashMap<u64, String> =
            m.membership_config.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
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

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.node_id)
    }

    /// Stops the Raft node (its background tasks end).
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}
