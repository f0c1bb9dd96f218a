//! The receiving side of Raft RPCs: decodes each request, hands it to the local
//! Raft node, and encodes `Result<reply, RaftError>` back. Vote requests are refused
//! while this node's [`VoteGate`] is closed (an empty journal not yet decided or
//! rejoined, see `bootstrap`); `ClusterState` and `Rejoin` are `bootstrap`'s;
//! `AddDispatcher` and `RemoveDispatcher` are `membership`'s.
//!
//! Before openraft sees a Vote, AppendEntries or InstallSnapshot, the message
//! is checked (`peer_checks`): one no correct peer sends is refused with
//! `InvalidArgument`, logged, and the node keeps serving. Snapshot chunks are
//! gathered here (`snapshot_inbox`) and the whole snapshot checked against its
//! meta before openraft, which purges the log on the last chunk, gets it.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_proto::v1 as pb;
use tonic::{Request, Response, Status};

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{InstallSnapshotRequest, InstallSnapshotResponse};

use super::applied::check_snapshot;
use super::bootstrap::{self, VoteGate, REJOIN_TIMEOUT};
use super::codec::{decode, encode};
use super::leader_heard::LeaderHeard;
use super::membership::Membership;
use super::peer_checks::PeerRefusal;
use super::peer_checks::{check_append, check_snapshot_chunk, check_vote};
use super::snapshot_inbox::{Received, SnapshotInbox};
use super::snapshot_mark::SnapshotMark;
use super::{NodeId, Raft, TypeConfig};

pub struct PeerService {
    raft: Raft,
    votes: VoteGate,
    /// Membership changes (`AddDispatcher`, `RemoveDispatcher`) and `Rejoin`.
    membership: Membership,
    /// Vote requests refused while the gate was closed (logged 1st, 21st, 41st, ...).
    refused: std::sync::atomic::AtomicU64,
    /// This node's id: no peer's message names it as leader or candidate.
    me: NodeId,
    /// Messages refused by `peer_checks` (logged 1st, 21st, 41st, ...).
    forged: std::sync::atomic::AtomicU64,
    /// A leader's snapshot, until its last chunk.
    inbox: SnapshotInbox,
    /// Told of a checked snapshot before openraft installs it (`snapshot_mark`).
    snapshots: SnapshotMark,
    /// Told of every AppendEntries of a current leader (`leader_heard`).
    heard: LeaderHeard,
}

type SnapshotResult =
    Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

impl PeerService {
    /// `dial`: the peers' Raft ports (`--peers` with `--raft-dial`); `security`: what
    /// this node presents to them (a follower forwards membership changes).
    pub fn new(
        raft: Raft,
        votes: VoteGate,
        snapshots: SnapshotMark,
        heard: LeaderHeard,
        dial: std::collections::BTreeMap<u64, String>,
        security: sluice_security::ClientSecurity,
    ) -> Self {
        let me = raft.metrics().borrow().id;
        let membership = Membership::new(raft.clone(), dial, security);
        PeerService {
            raft,
            votes,
            membership,
            refused: Default::default(),
            me,
            forged: Default::default(),
            inbox: SnapshotInbox::default(),
            snapshots,
            heard,
        }
    }

    /// The one place a refused peer message becomes a `Status` (and a log line).
    fn refuse(&self, rpc: &str, why: PeerRefusal) -> Status {
        let n = self.forged.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n % 20 == 1 {
            tracing::warn!(refused = n, "refused a Raft {rpc} from a peer: {why}");
        }
        Status::invalid_argument(format!("refused a Raft {rpc}: {why}"))
    }

    /// A chunk: kept until the last, then the whole snapshot checked and handed
    /// to openraft as one request.
    async fn install_snapshot(
        &self,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<SnapshotResult, Status> {
        check_snapshot_chunk(self.me, &req).map_err(|e| self.refuse("InstallSnapshot", e))?;
        // As openraft answers a chunk of an older leader: with this node's vote,
        // on which the sender stops.
        let vote = self.raft.metrics().borrow().vote;
        let current = req.vote.partial_cmp(&vote);
        if !matches!(current, Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)) {
            return Ok(Ok(InstallSnapshotResponse { vote }));
        }
        let whole = match self.inbox.receive(req) {
            Ok(Received::More) => return Ok(Ok(InstallSnapshotResponse { vote })),
            Ok(Received::Mismatch(e)) => return Ok(Err(RaftError::APIError(e))),
            Ok(Received::Complete(whole)) => whole,
            Err(e) => return Err(self.refuse("InstallSnapshot", e)),
        };
        // Decoding tens of MiB: off the runtime's threads.
        let checked = tokio::task::spawn_blocking(move || {
            check_snapshot(&whole.meta, &whole.data).map(|_| whole)
        })
        .await
        .map_err(|e| Status::internal(format!("checking a snapshot: {e}")))?;
        let whole = checked.map_err(|e| self.refuse("InstallSnapshot", e))?;
        self.snapshots.announce(whole.meta.last_log_id);
        Ok(self.raft.install_snapshot(whole).await)
    }
}

fn decode_req<T: DeserializeOwned>(req: Request<pb::RaftMessage>) -> Result<T, Status> {
    decode(&req.into_inner().data)
        .map_err(|e| Status::invalid_argument(format!("undecodable Raft message: {e}")))
}

fn reply<T: Serialize>(value: &T) -> Result<Response<pb::RaftMessage>, Status> {
    let data =
        encode(value).map_err(|e| Status::internal(format!("encoding a Raft reply: {e}")))?;
    Ok(Response::new(pb::RaftMessage { data: data.into() }))
}

#[tonic::async_trait]
impl pb::raft_peer_server::RaftPeer for PeerService {
    async fn append_entries(
        &self,
        req: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        let req = decode_req(req)?;
        check_append(self.me, &req).map_err(|e| self.refuse("AppendEntries", e))?;
        // Heard when it arrives, from a leader of this node's vote or a newer one
        // (not when its entries are written: a slow journal must not make a live
        // leader look silent).
        let vote = self.raft.metrics().borrow().vote;
        if matches!(
            req.vote.partial_cmp(&vote),
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        ) {
            self.heard.heard();
        }
        reply(&self.raft.append_entries(req).await)
    }

    async fn vote(
        &self,
        req: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        if !self.votes.is_open() {
            let n = self.refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let what = "refused a vote request: this node's journal was empty and it has not \
                        rejoined the group yet";
            // While it still decides what it is, a refusal is the ordinary start
            // of a new group (the first node to decide asks the others for votes).
            if !self.votes.is_rejoining() {
                tracing::debug!(refused = n, "{what}");
            } else if n % 20 == 1 {
                tracing::warn!(refused = n, "{what}");
            }
            return Err(Status::unavailable(
                "this node started with an empty journal and does not vote until it has \
                 rejoined the group (caught up as a learner)",
            ));
        }
        let req = decode_req(req)?;
        check_vote(self.me, &req).map_err(|e| self.refuse("Vote", e))?;
        reply(&self.raft.vote(req).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        reply(&PeerService::install_snapshot(self, decode_req(req)?).await?)
    }

    async fn cluster_state(
        &self,
        _req: Request<pb::ClusterStateRequest>,
    ) -> Result<Response<pb::ClusterStateResponse>, Status> {
        Ok(Response::new(bootstrap::cluster_state(&self.raft)))
    }

    async fn rejoin(
        &self,
        req: Request<pb::RejoinRequest>,
    ) -> Result<Response<pb::RejoinResponse>, Status> {
        let req = req.into_inner();
        let work = self.membership.rejoin(req.node_id, req.address);
        match tokio::time::timeout(REJOIN_TIMEOUT, work).await {
            Ok(Ok(())) => Ok(Response::new(pb::RejoinResponse {})),
            Ok(Err(e)) => Err(Status::failed_precondition(format!("rejoin: {e}"))),
            Err(_) => Err(Status::deadline_exceeded("rejoin: the node did not catch up in time")),
        }
    }

    async fn add_dispatcher(
        &self,
        req: Request<pb::AddDispatcherRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        Ok(Response::new(self.membership.add(req.into_inner()).await?))
    }

    async fn remove_dispatcher(
        &self,
        req: Request<pb::RemoveDispatcherRequest>,
    ) -> Result<Response<pb::MembershipResponse>, Status> {
        Ok(Response::new(self.membership.remove(req.into_inner()).await?))
    }
}
