//! The operator's side of membership changes (`sluice admin`, Python's
//! `sluice.admin`): asks a dispatcher's Raft port, with the group's peer
//! credentials, to add or remove a dispatcher (`raft::membership` answers). Any
//! node will do; a follower forwards to its leader. "Try again" answers (a node
//! down, no leader yet, another change in progress) are retried on the next
//! address until the deadline; a refusal is returned at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_proto::v1 as pb;
use sluice_proto::v1::raft_peer_client::RaftPeerClient;
use sluice_security::ClientSecurity;
use thiserror::Error;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Endpoint;
use tonic::Code;

/// Where and how to ask.
#[derive(Clone, Debug)]
pub struct AdminTarget {
    /// Raft ports (`HOST:PORT`) of some of the group's dispatchers.
    pub raft_addresses: Vec<String>,
    /// The whole operation's deadline (a new node's catch-up included).
    pub timeout: Duration,
    /// TLS (with a peer-CA certificate when the Raft ports want mutual TLS) and
    /// the peer secret.
    pub security: ClientSecurity,
}

/// The group after a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voters {
    /// Node id → client address.
    pub voters: BTreeMap<u64, String>,
    /// The leader that made the change.
    pub changed_by: u64,
}

#[derive(Debug, Error)]
pub enum AdminError {
    #[error("no --raft-address given: name a dispatcher's Raft port (HOST:PORT)")]
    NoAddress,
    #[error("raft address {address}: {error}")]
    BadAddress { address: String, error: String },
    #[error("{address} does not serve the RaftPeer service (a client port?): give a dispatcher's Raft port, by default its client port + 1000")]
    NotRaftPort { address: String },
    /// The group refused the change; the message says why and what to do.
    #[error("{address} refused: {message}")]
    Refused { address: String, code: Code, message: String },
    #[error("no dispatcher made the change within {deadline:?} (last answer: {last}); check the Raft addresses (client port + 1000 by default) and that a majority of the group runs (`sluice status`)")]
    NoAnswer { deadline: Duration, last: String },
}

type Peer = RaftPeerClient<InterceptedService<tonic::transport::Channel, sluice_security::Bearer>>;

/// Adds node `id` at `address` (`HOST:PORT[/RAFT_PORT]`, as in `--peers`).
pub async fn add_dispatcher(
    target: &AdminTarget,
    id: u64,
    address: &str,
) -> Result<Voters, AdminError> {
    let req = pb::AddDispatcherRequest {
        node_id: id,
        address: address.to_string(),
        timeout_ms: leader_timeout_ms(target.timeout),
        forwarded: false,
    };
    call(target, |mut c| {
        let req = req.clone();
        async move { c.add_dispatcher(req).await }
    })
    .await
}

/// Removes node `id` (a voter, the leader included, or a learner).
pub async fn remove_dispatcher(target: &AdminTarget, id: u64) -> Result<Voters, AdminError> {
    let req = pb::RemoveDispatcherRequest {
        node_id: id,
        timeout_ms: leader_timeout_ms(target.timeout),
        forwarded: false,
    };
    call(target, |mut c| async move { c.remove_dispatcher(req).await }).await
}

/// The leader's own deadline: ours less a margin for the answer to come back.
fn leader_timeout_ms(timeout: Duration) -> u64 {
    (timeout.saturating_sub(Duration::from_secs(5)).max(Duration::from_secs(1))).as_millis() as u64
}

async fn call<F, Fut>(target: &AdminTarget, f: F) -> Result<Voters, AdminError>
where
    F: Fn(Peer) -> Fut,
    Fut: std::future::Future<
        Output = Result<tonic::Response<pb::MembershipResponse>, tonic::Status>,
    >,
{
    if target.raft_addresses.is_empty() {
        return Err(AdminError::NoAddress);
    }
    let security = &target.security;
    let started = Instant::now();
    let mut last = String::new();
    loop {
        for address in &target.raft_addresses {
            let bad = |error: String| AdminError::BadAddress { address: address.clone(), error };
            let endpoint =
                Endpoint::from_shared(security.url(address).map_err(|e| bad(e.to_string()))?)
                    .map_err(|e| bad(e.to_string()))?
                    .connect_timeout(Duration::from_secs(2));
            let channel = security.apply(endpoint).map_err(|e| bad(e.to_string()))?.connect_lazy();
            let client =
                RaftPeerClient::new(InterceptedService::new(channel, security.bearer().clone()));
            match f(client).await {
                Ok(r) => {
                    let r = r.into_inner();
                    return Ok(Voters {
                        voters: r.voters.into_iter().collect(),
                        changed_by: r.changed_by,
                    });
                }
                Err(s) if s.code() == Code::Unavailable => {
                    last = format!("{address}: {}", s.message());
                }
                Err(s) if s.code() == Code::Unimplemented => {
                    return Err(AdminError::NotRaftPort { address: address.clone() })
                }
                Err(s) => {
                    return Err(AdminError::Refused {
                        address: address.clone(),
                        code: s.code(),
                        message: s.message().to_string(),
                    })
                }
            }
        }
        if started.elapsed() >= target.timeout {
            return Err(AdminError::NoAnswer { deadline: target.timeout, last });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
