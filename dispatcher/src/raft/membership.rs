//! Changing the group's voters while it serves: the leader's side of `sluice admin
//! add-dispatcher` / `remove-dispatcher` (docs/operations-procedures.md).
//!
//! Why here and this way: openraft changes membership by joint consensus, one change
//! at a time, on the leader. Adding a voter that has not caught up would stall commits
//! (the new majority includes a node without the log), so a new node is first added
//! as a learner and caught up (`add_learner`, blocking, with a deadline), then made a
//! voter. Both steps refuse what would hurt the group, before changing anything:
//!
//! ```text
//!  AddDispatcher(id, CLIENT/RAFT) ─► on a follower: forward once to the leader
//!    leader: id already a voter? ─► AlreadyExists
//!            RAFT answers ClusterState (2 s)? no ─► Unreachable (what to check)
//!            it already has a journal (not a learner of ours)? ─► HasJournal (wipe it)
//!            add_learner(id, blocking) within the deadline? no ─► CatchUpTimeout
//!            change_membership(+id) ─► its Rejoin is answered at once (`fresh`)
//!  RemoveDispatcher(id)
//!    leader: not a member ─► NotMember; the last voter ─► LastVoter
//!            a majority of the remaining voters answers? no ─► WouldLoseMajority
//!            change_membership(-id, retain = false); a removed leader steps down
//! ```
//! A node added here is stored in the membership as `CLIENT/RAFT`, so every node
//! dials its Raft port and names its client port in leader hints without being
//! restarted with a new `--peers` ([`client_part`], [`raft_part`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, ServerState};
use sluice_proto::v1 as pb;
use sluice_proto::v1::raft_peer_client::RaftPeerClient;
use sluice_security::ClientSecurity;
use thiserror::Error;

use super::bootstrap;
use super::network::peer_channel;
use super::{NodeId, Raft};

/// How long a node asked to join or stay may take to answer `ClusterState`.
const PROBE: Duration = Duration::from_secs(2);
/// The default time the new node gets to catch up.
pub(crate) const DEFAULT_CHANGE_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) use super::addresses::{client_part, raft_part};

/// Why a membership change was refused or did not finish. Each names what to do.
#[derive(Debug, Error)]
pub enum MembershipError {
    #[error("this node is not the leader and no leader is known yet (an election is under way); retry in a moment")]
    NoLeader,
    #[error("the leader changed while the request was forwarded; retry")]
    LeaderChanged,
    #[error("{0}")]
    BadAddress(String),
    #[error("node {0} is already a voter of the group; pick an unused --id (see `sluice status` for the members)")]
    AlreadyVoter(NodeId),
    #[error("node {0} is not a member of the group (see `sluice status` for the members)")]
    NotMember(NodeId),
    #[error("node {0} is the group's last voter: removing it would leave no group; add another node first")]
    LastVoter(NodeId),
    #[error("removing node {node} needs {needed} of the remaining voters {remaining:?} to answer, but only {answering:?} do: bring the others back first (a group without its majority stops serving)")]
    WouldLoseMajority {
        node: NodeId,
        needed: usize,
        remaining: Vec<NodeId>,
        answering: Vec<NodeId>,
    },
    #[error("node {node}'s Raft port {raft} does not answer from node {from}: {error}. Check that it runs (`sluice dispatcher --node-id {node} --peers <the group's entries and its own>`), that {raft} is reachable from the other dispatchers, and that it has the group's --peer-secret-file / certificates. The group was not changed")]
    Unreachable { node: NodeId, raft: String, from: NodeId, error: String },
    #[error("node {node} at {raft} already has a journal (a removed node's or another group's work_dir): stop it, empty its --work-dir (node-{node}/) and start it again. The group was not changed")]
    HasJournal { node: NodeId, raft: String },
    #[error("node {node} did not catch up within {waited:?}: it stays a learner (no vote, the majority is unchanged). Check its log and its Raft port's reachability; run add-dispatcher again to finish, or remove-dispatcher --id {node} to drop it")]
    CatchUpTimeout { node: NodeId, waited: Duration },
    #[error("another membership change is in progress; retry when it has finished")]
    InProgress,
    #[error("forwarding to the leader: {0}")]
    Forward(tonic::Status),
    #[error("raft: {0}")]
    Raft(String),
}

impl From<MembershipError> for tonic::Status {
    fn from(e: MembershipError) -> Self {
        use tonic::Status;
        let msg = e.to_string();
        match e {
            MembershipError::NoLeader
            | MembershipError::LeaderChanged
            | MembershipError::InProgress => Status::unavailable(msg),
            MembershipError::BadAddress(_) => Status::invalid_argument(msg),
            MembershipError::AlreadyVoter(_) => Status::already_exists(msg),
            MembershipError::NotMember(_) => Status::not_found(msg),
            MembershipError::CatchUpTimeout { .. } => Status::deadline_exceeded(msg),
            MembershipError::Forward(s) => s,
            MembershipError::Raft(_) => Status::internal(msg),
            MembershipError::LastVoter(_)
            | MembershipError::WouldLoseMajority { .. }
            | MembershipError::Unreachable { .. }
            | MembershipError::HasJournal { .. } => Status::failed_precondition(msg),
        }
    }
}

/// Where a node added by this leader stands (soft state, see [`Membership::fresh`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fresh {
    Adding,
    Added,
}

/// This node's side of membership changes: leads them, or forwards them.
pub(crate) struct Membership {
    raft: Raft,
    /// Peers' Raft ports from `--peers` (and `--raft-dial`); a node added later is
    /// dialled at the Raft part of its membership address.
    dial: BTreeMap<NodeId, String>,
    security: ClientSecurity,
    /// Soft state: nodes this leader is adding or has added and not yet heard a
    /// `Rejoin` from. A new node starts with an empty journal and so asks to rejoin
    /// (`bootstrap`); one caught up by `add_learner` and made a voter here is
    /// answered at once instead of being demoted and caught up again. Lost with the
    /// leader: a new leader treats its `Rejoin` as a wiped node's, slower and
    /// equally correct.
    fresh: Mutex<BTreeMap<NodeId, Fresh>>,
}

impl Membership {
    pub(crate) fn new(
        raft: Raft,
        dial: BTreeMap<NodeId, String>,
        security: ClientSecurity,
    ) -> Membership {
        Membership { raft, dial, security, fresh: Mutex::default() }
    }

    fn fresh(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Fresh>> {
        // Held for one insert or lookup, never across an await.
        self.fresh.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The Raft port of member `id`, as this node dials it.
    fn raft_address(&self, id: NodeId) -> Option<String> {
        if let Some(a) = self.dial.get(&id) {
            return Some(a.clone());
        }
        let m = self.raft.metrics().borrow().clone();
        let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
        Some(raft_part(&addr).unwrap_or(&addr).to_string())
    }

    /// The voters now, id → client address.
    fn voters(&self) -> BTreeMap<NodeId, String> {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        membership
            .voter_ids()
            .filter_map(|id| {
                membership.get_node(&id).map(|n| (id, client_part(&n.addr).to_string()))
            })
            .collect()
    }

    fn answer(&self) -> pb::MembershipResponse {
        let changed_by = self.raft.metrics().borrow().id;
        pb::MembershipResponse { voters: self.voters().into_iter().collect(), changed_by }
    }

    /// Whether a node's Raft port answers `ClusterState`; its answer if so.
    async fn probe(&self, raft: &str) -> Result<pb::ClusterStateResponse, String> {
        let channel = peer_channel(&self.security, raft, Some(PROBE))?;
        let me = self.raft.metrics().borrow().id;
        let mut client = RaftPeerClient::new(channel);
        let call = client.cluster_state(pb::ClusterStateRequest { node_id: me });
        match tokio::time::timeout(PROBE, call).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(status.message().to_string()),
            Err(_) => Err(format!("no answer within {PROBE:?}")),
        }
    }

    /// `None` when this node leads; the leader's client otherwise.
    fn leader_or_forward(
        &self,
        forwarded: bool,
    ) -> Result<Option<RaftPeerClient<super::network::PeerChannel>>, MembershipError> {
        let m = self.raft.metrics().borrow().clone();
        if m.state == ServerState::Leader {
            return Ok(None);
        }
        if forwarded {
            return Err(MembershipError::LeaderChanged);
        }
        let leader = m.current_leader.ok_or(MembershipError::NoLeader)?;
        let addr = self.raft_address(leader).ok_or(MembershipError::NoLeader)?;
        let channel = peer_channel(&self.security, &addr, Some(PROBE))
            .map_err(|e| MembershipError::Raft(format!("the leader's address {addr}: {e}")))?;
        Ok(Some(RaftPeerClient::new(channel)))
    }

    /// Adds node `id` at `address` (`HOST:PORT[/RAFT]`, as in `--peers`) as a voter.
    pub(crate) async fn add(
        &self,
        req: pb::AddDispatcherRequest,
    ) -> Result<pb::MembershipResponse, MembershipError> {
        let timeout = timeout_of(req.timeout_ms);
        if let Some(mut leader) = self.leader_or_forward(req.forwarded)? {
            let call = leader.add_dispatcher(pb::AddDispatcherRequest { forwarded: true, ..req });
            return forwarded(call, timeout).await;
        }
        let id = req.node_id;
        let (clients, rafts) = crate::config::parse_group(&format!("{id}={}", req.address))
            .map_err(|e| MembershipError::BadAddress(e.to_string()))?;
        let (client, raft) = (clients[&id].clone(), rafts[&id].clone());
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        if membership.voter_ids().any(|v| v == id) {
            return Err(MembershipError::AlreadyVoter(id));
        }
        let learner = membership.learner_ids().any(|l| l == id);
        let state = self.probe(&raft).await.map_err(|error| MembershipError::Unreachable {
            node: id,
            raft: raft.clone(),
            from: m.id,
            error,
        })?;
        if state.has_state && !learner {
            return Err(MembershipError::HasJournal { node: id, raft });
        }
        tracing::info!(node = id, %client, %raft, "adding a dispatcher: catching it up as a learner");
        self.fresh().insert(id, Fresh::Adding);
        let result = self.add_caught_up(id, format!("{client}/{raft}"), timeout).await;
        match &result {
            Ok(()) => {
                self.fresh().insert(id, Fresh::Added);
                tracing::info!(node = id, voters = ?self.voters(), "dispatcher added as a voter");
            }
            Err(e) => {
                self.fresh().remove(&id);
                tracing::warn!(node = id, error = %e, "adding a dispatcher failed");
            }
        }
        result.map(|()| self.answer())
    }

    async fn add_caught_up(
        &self,
        id: NodeId,
        addr: String,
        timeout: Duration,
    ) -> Result<(), MembershipError> {
        let learn = self.raft.add_learner(id, BasicNode::new(addr), true);
        match tokio::time::timeout(timeout, learn).await {
            Err(_) => return Err(MembershipError::CatchUpTimeout { node: id, waited: timeout }),
            Ok(r) => r.map_err(write_error)?,
        };
        let promote =
            self.raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), true);
        match tokio::time::timeout(timeout, promote).await {
            Err(_) => Err(MembershipError::CatchUpTimeout { node: id, waited: timeout }),
            Ok(r) => r.map(drop).map_err(write_error),
        }
    }

    /// Removes node `id` from the group (a voter, or a learner left by an add that
    /// timed out). The leader may remove itself: it steps down once the change is
    /// committed, and the others elect a leader among themselves.
    pub(crate) async fn remove(
        &self,
        req: pb::RemoveDispatcherRequest,
    ) -> Result<pb::MembershipResponse, MembershipError> {
        let timeout = timeout_of(req.timeout_ms);
        if let Some(mut leader) = self.leader_or_forward(req.forwarded)? {
            let call =
                leader.remove_dispatcher(pb::RemoveDispatcherRequest { forwarded: true, ..req });
            return forwarded(call, timeout).await;
        }
        let id = req.node_id;
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let change = if voters.contains(&id) {
            if voters.len() == 1 {
                return Err(MembershipError::LastVoter(id));
            }
            let remaining: Vec<NodeId> = voters.iter().copied().filter(|v| *v != id).collect();
            let mut answering = vec![];
            for v in &remaining {
                let up = *v == m.id
                    || match self.raft_address(*v) {
                        Some(a) => self.probe(&a).await.is_ok(),
                        None => false,
                    };
                if up {
                    answering.push(*v);
                }
            }
            // Joint consensus needs a majority of the new voters (and of the old,
            // which these plus the leaving node make whenever the new one holds).
            let needed = remaining.len() / 2 + 1;
            if answering.len() < needed {
                return Err(MembershipError::WouldLoseMajority {
                    node: id,
                    needed,
                    remaining,
                    answering,
                });
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if membership.learner_ids().any(|l| l == id) {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Err(MembershipError::NotMember(id));
        };
        tracing::info!(node = id, leader = m.id, "removing a dispatcher");
        let change = self.raft.change_membership(change, false);
        match tokio::time::timeout(timeout, change).await {
            Err(_) => {
                return Err(MembershipError::Raft(format!(
                    "the change did not commit within {timeout:?}; check `sluice status`"
                )))
            }
            Ok(r) => r.map_err(write_error)?,
        };
        self.fresh().remove(&id);
        tracing::info!(node = id, voters = ?self.voters(), "dispatcher removed");
        Ok(self.answer())
    }

    /// The leader's answer to a `Rejoin` from `node` (an empty journal asking to be
    /// taken back, `bootstrap`): at once for a node this leader has just added; not
    /// while it is still being added; otherwise a wiped member's rejoin.
    pub(crate) async fn rejoin(&self, node: NodeId, address: String) -> Result<(), String> {
        let fresh = self.fresh().get(&node).copied();
        match fresh {
            Some(Fresh::Adding) => {
                Err(format!("node {node} is being added (add-dispatcher); it is caught up first"))
            }
            Some(Fresh::Added) if self.voters().contains_key(&node) => {
                self.fresh().remove(&node);
                tracing::info!(node, "a node added by add-dispatcher rejoined: it votes now");
                Ok(())
            }
            _ => bootstrap::rejoin_as_learner(&self.raft, node, address).await,
        }
    }
}

fn timeout_of(ms: u64) -> Duration {
    if ms == 0 {
        DEFAULT_CHANGE_TIMEOUT
    } else {
        Duration::from_millis(ms)
    }
}

/// Awaits a forwarded call, for a little longer than the leader's own deadline.
async fn forwarded(
    call: impl std::future::Future<
        Output = Result<tonic::Response<pb::MembershipResponse>, tonic::Status>,
    >,
    timeout: Duration,
) -> Result<pb::MembershipResponse, MembershipError> {
    match tokio::time::timeout(timeout + PROBE * 3, call).await {
        Ok(Ok(r)) => Ok(r.into_inner()),
        Ok(Err(status)) => Err(MembershipError::Forward(status)),
        Err(_) => {
            Err(MembershipError::Raft(format!("the leader did not answer within {timeout:?}")))
        }
    }
}

fn write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> MembershipError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => MembershipError::LeaderChanged,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_),
        )) => MembershipError::InProgress,
        e => MembershipError::Raft(e.to_string()),
    }
}
