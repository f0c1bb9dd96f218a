//! Raft RPCs to peers over the `RaftPeer` gRPC service. Each message is the
//! openraft request encoded with the codec; the answer is
//! `Result<reply, RaftError>` encoded the same way. A peer that cannot be reached
//! (the call failed) is `Unreachable` to openraft, which backs off and retries on
//! its own schedule; one that answers too slowly is a `Network` error, retried
//! without a backoff, as openraft treats its own timeouts.
//!
//! Raft traffic goes to each peer's Raft port (`DispatcherConfig::raft_peers`,
//! or a `raft_dial` override), over TLS with this node's certificate and with
//! the peer secret when configured (`access.rs`).
//!
//! One channel (one HTTP/2 connection) per peer, shared by every client openraft
//! makes for it ([`PeerChannels`]). openraft 0.9 asks for a new client not only
//! per replication stream but per leadership confirmation (`ensure_linearizable`,
//! which every leader read runs, `read_barrier.rs`): with a channel per client,
//! each confirmation dialled both followers afresh — a TCP connect and an HTTP/2
//! handshake on each side, hundreds of times a second under a fleet of long
//! polls, ~10 % of the leader's CPU at 2,000 workers + 2,000 consumers
//! (docs/performance.md, "Scale").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
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
use sluice_security::{Bearer, ClientSecurity};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use super::codec::{decode, encode, encoded_len, MAX_RAFT_MESSAGE_BYTES};
use super::contacts::PeerContacts;
use super::{NodeId, TypeConfig};

/// Makes one [`PeerClient`] per peer; channels connect lazily and reconnect.
#[derive(Clone, Default)]
pub struct PeerNetwork {
    /// Where each peer's Raft port is (`DispatcherConfig::raft_peers` with the
    /// `raft_dial` overrides applied); a peer not here is dialled at its
    /// membership address.
    pub dial: std::collections::BTreeMap<NodeId, String>,
    /// TLS and peer secret presented to peers.
    pub security: ClientSecurity,
    /// Each RPC's outcome, for the status page (`contacts.rs`).
    pub contacts: PeerContacts,
    /// The channel each peer's clients share.
    pub channels: PeerChannels,
}

/// The most (peer, address) pairs with a channel; past it the map starts over
/// (a group has a handful of members; addresses change only with membership).
const MAX_PEER_CHANNELS: usize = 64;

/// Soft state: one lazily connecting channel per peer id and dial address,
/// cloned into each [`PeerClient`] (a tonic `Channel` multiplexes calls over
/// one connection and reconnects on its own after a failure). Rebuilt empty by
/// a restarted process; a peer's new address gets a new channel.
#[derive(Clone, Default)]
pub struct PeerChannels(Arc<Mutex<HashMap<(NodeId, String), PeerChannel>>>);

impl PeerChannels {
    /// The channel to `target` at `addr`, made with `security` the first time.
    /// A bad address or unusable TLS settings are not kept: each client reports them.
    fn get(
        &self,
        security: &ClientSecurity,
        target: NodeId,
        addr: &str,
    ) -> Result<PeerChannel, String> {
        // A std Mutex: one map operation, no await (`connect_lazy` does not dial).
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let key = (target, addr.to_string());
        if let Some(channel) = map.get(&key) {
            return Ok(channel.clone());
        }
        let channel = peer_channel(security, addr, None)?;
        if map.len() >= MAX_PEER_CHANNELS {
            map.clear();
        }
        map.insert(key, channel.clone());
        Ok(channel)
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        // A node added by `sluice admin add-dispatcher` is in no --peers: its
        // membership address carries its Raft port (`addresses::raft_part`).
        let addr = self
            .dial
            .get(&target)
            .map(String::as_str)
            .unwrap_or_else(|| super::addresses::raft_part(&node.addr).unwrap_or(&node.addr));
        let addr = &addr.to_string();
        let channel = self.channels.get(&self.security, target, addr);
        PeerClient {
            target,
            address: addr.clone(),
            channel,
            max_message_bytes: MAX_RAFT_MESSAGE_BYTES,
            contacts: self.contacts.clone(),
        }
    }
}

/// A lazily connecting channel to a peer's Raft port, over TLS and with the peer
/// secret as configured: every call to a peer (Raft RPCs, and the bootstrap's
/// questions) goes through one.
pub(crate) type PeerChannel = InterceptedService<Channel, Bearer>;

/// [`PeerChannel`] to `addr`; Err names a bad address or unusable TLS settings.
pub(crate) fn peer_channel(
    security: &ClientSecurity,
    addr: &str,
    connect_timeout: Option<std::time::Duration>,
) -> Result<PeerChannel, String> {
    let endpoint = Endpoint::from_shared(security.url(addr).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let mut endpoint = sluice_proto::limits::client_endpoint(endpoint).tcp_nodelay(true);
    if let Some(timeout) = connect_timeout {
        endpoint = endpoint.connect_timeout(timeout);
    }
    let endpoint = security.apply(endpoint).map_err(|e| e.to_string())?;
    Ok(InterceptedService::new(endpoint.connect_lazy(), security.bearer().clone()))
}

pub struct PeerClient {
    target: NodeId,
    address: String,
    /// Err when the configured address is not a valid URI (or the TLS settings
    /// unusable): every RPC reports it.
    channel: Result<PeerChannel, String>,
    /// The largest RPC sent (`MAX_RAFT_MESSAGE_BYTES`; smaller in tests).
    max_message_bytes: u64,
    contacts: PeerContacts,
}

/// How many of `rpc`'s first entries fit in an AppendEntries of `max` bytes (at
/// least one: every entry is within the entry cap, far below `max`).
fn entries_that_fit(rpc: &AppendEntriesRequest<TypeConfig>, max: u64) -> u64 {
    let empty = AppendEntriesRequest::<TypeConfig> { entries: vec![], ..rpc.clone() };
    let mut total = encoded_len(&empty).unwrap_or(0);
    let mut n = 0u64;
    for entry in &rpc.entries {
        total = total.saturating_add(encoded_len(entry).unwrap_or(u64::MAX));
        if total > max {
            break;
        }
        n += 1;
    }
    n.max(1)
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
        if data.len() as u64 > self.max_message_bytes {
            // openraft answers PayloadTooLarge on AppendEntries by resending
            // fewer entries (`append_entries` below gives the count); any other
            // RPC this large is a failure to report, not to resend as is.
            let msg = format!(
                "{which} to node {} is {} bytes, over the {} byte limit of a Raft message",
                self.target,
                data.len(),
                self.max_message_bytes
            );
            return Err(RPCError::Network(NetworkError::new(&std::io::Error::other(msg))));
        }
        let msg = pb::RaftMessage { data: data.into() };
        let call = async {
            match which {
                "AppendEntries" => client.append_entries(msg).await,
                "Vote" => client.vote(msg).await,
                _ => client.install_snapshot(msg).await,
            }
        };
        let reply = match tokio::time::timeout(option.hard_ttl(), call).await {
            Ok(Ok(r)) => {
                self.contacts.answered(self.target);
                r.into_inner()
            }
            Ok(Err(status)) => {
                self.contacts.failed(self.target, status.message().to_string());
                return Err(unreachable(status.to_string()));
            }
            // A slow answer is not an unreachable peer. openraft bounds the same
            // RPC by the same TTL (the heartbeat interval) and resends at once
            // when *its* timeout fires, but backs a stream off for 500 ms after
            // `Unreachable`; both timers fire together, ours first. Calling this
            // one Unreachable turned any pause over 50 ms (a restarted follower's
            // catch-up, a busy disk) into half a second without replication, to
            // both followers at once when the pause was the leader's: no commit,
            // no election (docs/performance.md, "Failover as `sluice read` sees
            // it").
            Err(_) => {
                let msg = format!(
                    "{which} to node {} at {}: no answer within {:?}",
                    self.target,
                    self.address,
                    option.hard_ttl()
                );
                self.contacts
                    .failed(self.target, format!("no answer within {:?}", option.hard_ttl()));
                let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, msg);
                return Err(RPCError::Network(NetworkError::new(&timed_out)));
            }
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
        if rpc.entries.len() > 1 {
            let fit = entries_that_fit(&rpc, self.max_message_bytes);
            if fit < rpc.entries.len() as u64 {
                return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(fit)));
            }
        }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use openraft::{RaftNetworkFactory, Vote};

    use super::*;

    fn heartbeat() -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            leader_commit: None,
            entries: vec![],
        }
    }

    async fn client_of(addr: String) -> PeerClient {
        PeerNetwork::default().new_client(2, &BasicNode { addr }).await
    }

    #[tokio::test]
    async fn a_peer_that_does_not_answer_in_time_is_slow_not_unreachable() {
        // Accepts connections and never answers (not even the HTTP/2 handshake).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut open = vec![];
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let mut client = client_of(addr).await;
        let option = RPCOption::new(Duration::from_millis(20));
        let err = client.append_entries(heartbeat(), option).await.unwrap_err();
        assert!(matches!(err, RPCError::Network(_)), "{err:?}");
        held.abort();
    }

    #[tokio::test]
    async fn an_append_over_the_message_limit_asks_openraft_for_fewer_entries() {
        use openraft::{Entry, EntryPayload, LogId};
        let entry = |i: u64| Entry::<TypeConfig> {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), i),
            payload: EntryPayload::Normal(crate::Command::ReleaseClient { client_id: i }),
        };
        let mut rpc = heartbeat();
        rpc.entries = (1..=10).map(entry).collect();
        let one = encoded_len(&rpc.entries[0]).unwrap();
        let header = encoded_len(&heartbeat()).unwrap();
        // Room for three entries: the hint says three, and nothing is sent
        // (the address refuses connections: sending would be Unreachable).
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let mut client = client_of(addr).await;
        client.max_message_bytes = header + 3 * one + one / 2;
        let option = RPCOption::new(Duration::from_secs(5));
        match client.append_entries(rpc.clone(), option.clone()).await.unwrap_err() {
            RPCError::PayloadTooLarge(p) => assert_eq!(p.entries_hint(), 3),
            e => panic!("{e:?}"),
        }
        // Three entries fit: sent (and so Unreachable here).
        rpc.entries.truncate(3);
        let err = client.append_entries(rpc, option).await.unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn every_client_of_a_peer_shares_one_connection() {
        // A peer that accepts one connection, then no more (its port closes),
        // and never answers on it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut network = PeerNetwork::default();
        let node = BasicNode { addr: addr.clone() };
        let option = RPCOption::new(Duration::from_millis(20));
        let mut first = network.new_client(2, &node).await;
        let err = first.append_entries(heartbeat(), option.clone()).await.unwrap_err();
        assert!(matches!(err, RPCError::Network(_)), "{err:?}");
        let (held, _) = listener.accept().await.unwrap();
        drop(listener);

        // A second client (openraft makes one per leadership confirmation) goes
        // over that connection: slow, as the first. A connection of its own
        // would be refused (Unreachable).
        let mut second = network.new_client(2, &node).await;
        let err = second.append_entries(heartbeat(), option.clone()).await.unwrap_err();
        assert!(matches!(err, RPCError::Network(_)), "{err:?}");

        // Another peer id at the same address is another peer: its own channel.
        let mut other = network.new_client(3, &node).await;
        let err = other.append_entries(heartbeat(), option).await.unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
        drop(held);
    }

    #[tokio::test]
    async fn a_peer_that_refuses_the_connection_is_unreachable() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let mut client = client_of(addr).await;
        let option = RPCOption::new(Duration::from_secs(5));
        let err = client.append_entries(heartbeat(), option).await.unwrap_err();
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    }
}
