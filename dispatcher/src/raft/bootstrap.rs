//! Starting a node of a multi-node group whose journal is empty: a brand-new group, or a
//! node whose work_dir was wiped (or lost) while the others kept the group's state.
//!
//! Why: a wiped voter has forgotten its votes and the entries it acknowledged. Back as a
//! voter with an empty log it could grant its vote to a candidate lacking committed entries
//! (one it helped commit), and that candidate would win and overwrite them; or vote twice in
//! one term. So an empty node does not vote ([`VoteGate`] closed, enforced by the peer
//! service) until it has decided, with its peers, what it is:
//!
//! ```text
//!  empty journal ─► ask every peer ClusterState, every 200 ms
//!     ├─ a peer has state (a log past the bootstrap entry, a snapshot) ──► rejoin: ask the leader
//!     │     (Rejoin) to demote this node to learner, catch it up (add_learner, blocking),
//!     │     and make it a voter again; then open the gate
//!     └─ a majority of the group (this node included) answered "no state" ──► a new
//!           group: initialize with every peer as voter (as before), open the gate
//! ```
//! A majority of empty nodes means a new group unless a majority lost its disks at once,
//! which no replication survives anyway. A node started late into a brand-new group that has
//! already elected a leader takes the rejoin path too: slower, equally correct, no flag.
//! The leader's side of `Rejoin` is [`rejoin_as_learner`]. A node new to the group (not a
//! member) rejoins the same way, once `sluice admin add-dispatcher` has made it one
//! (`raft::membership`); until then its `Rejoin` is refused, and it waits, not voting.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{BasicNode, ChangeMembers, ServerState};
use sluice_proto::v1 as pb;
use sluice_proto::v1::raft_peer_client::RaftPeerClient;
use sluice_security::ClientSecurity;

use super::network::{peer_channel, PeerChannel};
use super::{NodeId, Raft};

/// How often an undecided node asks its peers again.
const POLL: Duration = Duration::from_millis(200);
/// Time limit of one ClusterState call.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);
/// Time limit of one Rejoin call: the leader catches this node up before answering.
pub(crate) const REJOIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a waiting node says so in its log.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// Whether this node may answer vote requests. Closed while an empty node has not yet
/// decided (or finished rejoining); open otherwise.
#[derive(Clone, Debug)]
pub struct VoteGate(Arc<AtomicU8>);

/// The gate's states: closed while the node decides what it is (a refused vote
/// then is the ordinary start of a new group, whose nodes decide a few hundred
/// milliseconds apart), closed while it rejoins (worth an operator's eye), open.
const DECIDING: u8 = 0;
const REJOINING: u8 = 1;
const OPEN: u8 = 2;

impl VoteGate {
    pub(crate) fn new(open: bool) -> VoteGate {
        VoteGate(Arc::new(AtomicU8::new(if open { OPEN } else { DECIDING })))
    }

    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire) == OPEN
    }

    /// Closed because the node found the group has state and is rejoining it,
    /// not because it is still deciding.
    pub fn is_rejoining(&self) -> bool {
        self.0.load(Ordering::Acquire) == REJOINING
    }

    fn rejoining(&self) {
        self.0.store(REJOINING, Ordering::Release);
    }

    fn open(&self) {
        self.0.store(OPEN, Ordering::Release);
    }
}

/// The peers to ask: every member but `me`, at its Raft dial address.
pub(crate) struct Peers {
    pub me: NodeId,
    pub my_address: String,
    pub members: BTreeMap<NodeId, String>,
    pub dial: BTreeMap<NodeId, String>,
    /// TLS and the peer secret, as for Raft RPCs.
    pub security: ClientSecurity,
}

impl Peers {
    fn others(&self) -> impl Iterator<Item = (NodeId, &String)> {
        self.members
            .iter()
            .filter(|(id, _)| **id != self.me)
            .map(|(id, addr)| (*id, self.dial.get(id).unwrap_or(addr)))
    }

    fn client(&self, addr: &str) -> Option<RaftPeerClient<PeerChannel>> {
        let channel = peer_channel(&self.security, addr, Some(ASK_TIMEOUT)).ok()?;
        Some(RaftPeerClient::new(channel))
    }
}

/// Decides, then initializes or rejoins, then opens `gate`. Runs until done.
pub(crate) async fn run(raft: Raft, peers: Peers, gate: VoteGate) {
    let majority = peers.members.len() / 2 + 1;
    let started = Instant::now();
    let mut reported = Instant::now();
    loop {
        let mut empty = 1; // this node
        let mut with_state = None;
        for (id, addr) in peers.others() {
            match ask_state(&peers, addr).await {
                Some(s) if s.has_state => with_state = Some((id, s.term)),
                Some(_) => empty += 1,
                None => {}
            }
        }
        if let Some((peer, term)) = with_state {
            // Info, not a warning: a node of a brand-new group that decided after
            // the others had elected a leader comes here too (`sluice local` at
            // times). A rejoin that does not end soon is warned of by `rejoin`.
            tracing::info!(
                node_id = peers.me,
                peer,
                term,
                "this node's journal is empty but the group has state (the node was late to \
                 a new group, or its work_dir was wiped or is new): rejoining as a learner; \
                 it votes only once the leader has caught it up and made it a voter again"
            );
            gate.rejoining();
            rejoin(&peers).await;
            gate.open();
            tracing::info!(node_id = peers.me, "rejoined as a voter, caught up");
            return;
        }
        if empty >= majority {
            let nodes: BTreeMap<NodeId, BasicNode> =
                peers.members.iter().map(|(id, a)| (*id, BasicNode::new(a))).collect();
            match raft.initialize(nodes).await {
                Ok(()) => tracing::info!(members = ?peers.members, "raft group bootstrapped"),
                Err(e) => tracing::debug!(error = %e, "initialize (another node may have)"),
            }
            gate.open();
            return;
        }
        if reported.elapsed() >= REPORT_EVERY {
            reported = Instant::now();
            tracing::warn!(
                node_id = peers.me, waited = ?started.elapsed(), answered_empty = empty, majority,
                "journal empty: waiting for peers to say whether the group is new"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn ask_state(peers: &Peers, addr: &str) -> Option<pb::ClusterStateResponse> {
    let mut client = peers.client(addr)?;
    let call = client.cluster_state(pb::ClusterStateRequest { node_id: peers.me });
    match tokio::time::timeout(ASK_TIMEOUT, call).await {
        Ok(Ok(r)) => Some(r.into_inner()),
        _ => None,
    }
}

/// Asks each peer in turn to take this node back until the leader has done it.
async fn rejoin(peers: &Peers) {
    let mut reported = Instant::now();
    let mut last_refusal = String::new();
    loop {
        for (id, addr) in peers.others() {
            let Some(mut client) = peers.client(addr) else { continue };
            let req = pb::RejoinRequest { node_id: peers.me, address: peers.my_address.clone() };
            match tokio::time::timeout(REJOIN_TIMEOUT, client.rejoin(req)).await {
                Ok(Ok(_)) => return,
                Ok(Err(status)) => {
                    tracing::debug!(peer = id, %status, "rejoin not done there");
                    if !status.message().starts_with("rejoin: not the leader") {
                        last_refusal = status.message().to_string();
                    }
                }
                Err(_) => tracing::debug!(peer = id, "rejoin timed out"),
            }
        }
        if reported.elapsed() >= REPORT_EVERY {
            reported = Instant::now();
            tracing::warn!(
                node_id = peers.me,
                leader_said = %last_refusal,
                "rejoining: no leader has taken this node back yet"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What this node tells an asking peer (see [`pb::ClusterStateResponse`]).
pub(crate) fn cluster_state(raft: &Raft) -> pb::ClusterStateResponse {
    let m = raft.metrics().borrow().clone();
    // Not the term: a candidate of a brand-new group raises it before anything is
    // decided, and counting that as state would send the other new nodes down the
    // rejoin path with no leader to take them back. An entry past the bootstrap one
    // exists only once a leader was elected (its first, blank entry).
    let has_state = m.last_log_index.is_some_and(|i| i > 0)
        || m.last_applied.is_some_and(|l| l.index > 0)
        || m.snapshot.is_some();
    pb::ClusterStateResponse { has_state, term: m.current_term }
}

/// The leader's side of `Rejoin`: demotes `node` to learner if it is a voter, re-adds it as a
/// learner and waits until it has caught up, then makes it a voter again. A node that is
/// not a member at all is refused: adding a node is `sluice admin add-dispatcher`'s
/// (`raft::membership`, which also answers the `Rejoin` of a node it has just added).
pub(crate) async fn rejoin_as_learner(
    raft: &Raft,
    node: NodeId,
    address: String,
) -> Result<(), String> {
    let m = raft.metrics().borrow().clone();
    if m.state != ServerState::Leader {
        return Err(format!("not the leader (leader: {:?})", m.current_leader));
    }
    if node == m.id {
        return Err("a leader cannot rejoin itself".into());
    }
    let membership = m.membership_config.membership();
    let is_voter = membership.voter_ids().any(|v| v == node);
    if !is_voter && membership.get_node(&node).is_none() {
        // Not a wiped member but a node the group never had: joining changes the
        // majority, which is the operator's decision (`raft::membership`).
        return Err(format!(
            "node {node} is not a member of the group: add it with `sluice admin \
             add-dispatcher --id {node} --address HOST:PORT/RAFT_PORT` \
             (docs/operations-procedures.md)"
        ));
    }
    if is_voter {
        let remove = ChangeMembers::RemoveVoters(BTreeSet::from([node]));
        raft.change_membership(remove, true).await.map_err(|e| e.to_string())?;
    }
    // The address the group already has for it, if any (a peer cannot redirect another's
    // traffic); the one it gave otherwise.
    let known = m.membership_config.membership().get_node(&node).cloned();
    let basic = known.unwrap_or_else(|| BasicNode::new(&address));
    raft.add_learner(node, basic, true).await.map_err(|e| e.to_string())?;
    let add = ChangeMembers::AddVoterIds(BTreeSet::from([node]));
    raft.change_membership(add, true).await.map_err(|e| e.to_string())?;
    tracing::info!(
        node,
        "a node with an empty journal was caught up as a learner and is a voter again"
    );
    Ok(())
}
