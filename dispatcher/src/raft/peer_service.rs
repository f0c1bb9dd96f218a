//! The receiving side of Raft RPCs: decodes each request, hands it to the local
//! Raft node, and encodes `Result<reply, RaftError>` back.

use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::codec::{decode, encode};
use super::Raft;

pub struct PeerService {
    raft: Raft,
}

impl PeerService {
    pub fn new(raft: Raft) -> Self {
        PeerService { raft }
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
        reply(&self.raft.vote(decode_req(req)?).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<pb::RaftMessage>,
    ) -> Result<Response<pb::RaftMessage>, Status> {
        reply(&self.raft.install_snapshot(decode_req(req)?).await)
    }
}
