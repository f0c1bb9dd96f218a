//! Raft RPCs to peers over the `RaftPeer` gRPC service. Each message is the
//! openraft request encoded with the codec; the answer is
//! `Result<reply, RaftError>` encoded the same way. A peer that cannot be reached
//! is `Unreachable` to openraft, which backs off and retries on its own schedule.

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_proto::v1 as pb;
use sluice_proto::v1::raft_peer_client::RaftPeerClient;
use sluice_proto::MAX_MESSAGE_BYTES;
use tonic::transport::{Channel, Endpoint};

use super::codec::{decode, encode};
use super::{NodeId, TypeConfig};

/// Makes one [`PeerClient`] per peer; channels connect lazily and reconnect.
#[derive(Clone, Default)]
pub struct PeerNetwork {
    /// Per-peer address overrides for Raft traffic (`DispatcherConfig::raft_dial`).
    pub dial: std::collections::BTreeMap<NodeId, String>,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        let addr = self.dial.get(&target).unwrap_or(&node.addr);
        let url = format!("http://{addr}");
        let channel = Endpoint::from_shared(url)
            .map(|e| e.tcp_nodelay(true).connect_lazy())
            .map_err(|e| e.to_string());
        PeerClient { target, address: addr.clone(), channel }
    }
}

pub struct PeerClient {
    target: NodeId,
    address: String,
    /// Err when the configured address is not a valid URI: every RPC reports it.
    channel: Result<Channel, String>,
}

type Rpc<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl PeerClient {
    async fn call<Req, Resp, E>(
        &self,
        which: &'static str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, Rpc<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |msg: String| {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(format!(
                "{which} to node {} at {}: {msg}",
                self.target, self.address
            ))))
        };
        let channel = self.channel.clone().map_err(unreachable)?;
        let mut client = RaftPeerClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let data = encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let msg = pb::RaftMessage { data: data.into() };
        let call = async {
            match which {
                "AppendEntries" => client.append_entries(msg).await,
                "Vote" => client.vote(msg).await,
                _ => client.install_snapshot(msg).await,
            }
        };
        let reply = match tokio::time::timeout(option.hard_ttl(), call).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => return Err(unreachable(status.to_string())),
            Err(_) => return Err(unreachable(format!("no answer within {:?}", option.hard_ttl()))),
        };
        let result: Result<Resp, RaftError<NodeId, E>> =
            decode(&reply.data).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Rpc<openraft::error::Infallible>> {
        self.call("AppendEntries", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Rpc<InstallSnapshotError>> {
        self.call("InstallSnapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Rpc<openraft::error::Infallible>> {
        self.call("Vote", &rpc, &option).await
    }
}
