//! The receiving side of Raft RPCs: decodes each request, hands it to the local
//! Raft node, and encodes `Result<reply, RaftError>` back. Vote requests are refused
//! while this node's [`VoteGate`] is closed (an empty journal not yet decided or
//! rejoined, see `bootstrap`); `ClusterState` and `Rejoin` are `bootstrap`'s;
//! `AddDispatcher` and `RemoveDispatcher` are `membership`'s.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::bootstrap::{self, VoteGate, REJOIN_TIMEOUT};
use super::codec::{decode, encode};
use super::membership::Membership;
use super::Raft;

pub struct PeerService {
    raft: Raft,
    votes: VoteGate,
    /// Membership changes (`AddDispatcher`, `RemoveDispatcher`) and `Rejoin`.
    membership: Membership,
    /// Vote requests refused while the gate was closed (logged 1st, 21st, 41st, ...).
    refused: std::sync::atomic::AtomicU64,
}

impl PeerService {
    /// `dial`: the peers' Raft ports (`--peers` with `--raft-dial`); `security`: what
    /// this node presents to them (a follower forwards membership changes).
    pub fn new(
        raft: Raft,
        votes: VoteGate,
        dial: std::collections::BTreeMap<u64, String>,
        security: sluice_security::ClientSecurity,
    ) -> Self {
        let membership = Membership::new(raft.clone(), dial, security);
        PeerService { raft, votes, membership, refused: Default::default() }
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
        reply(&self.raft.append_entries(decode_req(req)?).await)
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
        reply(&self.raft.vote(decode_req(req)?).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        reply(&self.raft.install_snapshot(decode_req(req)?).await)
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
