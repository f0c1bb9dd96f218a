//! Who may talk to a dispatcher, and how (docs/security.md, "Identity and
//! transport").
//!
//! A dispatcher has two listeners:
//! - the **client port** (the Dispatcher service): TLS with the node's
//!   certificate when configured; a bearer token of role `client` for client RPCs
//!   and of role `worker` for the worker RPCs ([`role_of`]);
//! - the **Raft port** (the RaftPeer service, only in a group of several nodes):
//!   mutual TLS — the dialling peer's certificate must be signed by the peer CA —
//!   and/or the group's peer secret on every RPC. No client or worker token is
//!   accepted there: the peer secret is the only token its guard knows. Off
//!   loopback it needs a peer identity of its own: the secret, or a `--peer-ca`
//!   other than `--tls-ca` (mutual TLS against the clients' CA would let every
//!   worker's and client's certificate in, issue 31).
//!
//! The node dials its peers' Raft ports presenting its own certificate and the
//! peer secret ([`DispatcherSecurity::peer_client`]).

use sluice_security::{ClientSecurity, Guard, Role, Secret, SecurityError, TlsSettings, TokenSet};
use tonic::transport::ServerTlsConfig;

/// The Dispatcher RPCs only workers make; every other Dispatcher RPC is a client's.
const WORKER_RPCS: [&str; 3] = ["RegisterWorker", "WorkerHeartbeat", "GetSplit"];

/// The role a Dispatcher RPC path needs.
pub fn role_of(path: &str) -> Role {
    let method = path.rsplit('/').next().unwrap_or_default();
    if WORKER_RPCS.contains(&method) {
        Role::Worker
    } else {
        Role::Client
    }
}

/// A dispatcher's TLS and credentials. The default is none of them: plain text
/// and no checks, which only a loopback listener accepts without `insecure`.
#[derive(Clone, Debug, Default)]
pub struct DispatcherSecurity {
    /// `--tls-cert`, `--tls-key`, `--tls-ca`: served on both listeners; the CA
    /// verifies peers (and is the default peer CA).
    pub tls: Option<TlsSettings>,
    /// `--auth-tokens`: the client and worker tokens accepted on the client port.
    pub tokens: Option<TokenSet>,
    /// `--peer-ca`: the CA whose certificates the Raft port accepts (PEM);
    /// default: the `--tls-ca`. Give one that signs only dispatchers' certificates
    /// when workers' or clients' certificates come from the same `--tls-ca`.
    pub peer_ca: Option<Vec<u8>>,
    /// `--peer-secret-file`: a secret every Raft RPC must carry.
    pub peer_secret: Option<Secret>,
    /// `--insecure`: serve off loopback without the protections above.
    pub insecure: bool,
}

impl DispatcherSecurity {
    /// The guard of the client port.
    pub fn client_guard(&self) -> Guard {
        Guard::from_tokens(self.tokens.clone(), role_of, "dispatcher")
    }

    /// The guard of the Raft port: the peer secret, or nothing (then mutual TLS,
    /// or loopback, is the protection).
    pub fn peer_guard(&self) -> Guard {
        let tokens = self.peer_secret.clone().map(|s| TokenSet::single(Role::Peer, "peer", s));
        Guard::from_tokens(tokens, |_| Role::Peer, "dispatcher's Raft listener")
    }

    /// TLS of the client port, if configured.
    pub fn client_port_tls(&self) -> Result<Option<ServerTlsConfig>, SecurityError> {
        sluice_security::install_crypto_provider();
        self.tls.as_ref().map(TlsSettings::server_config).transpose()
    }

    /// The CA the Raft port verifies peers' certificates against.
    fn peer_ca(&self) -> Option<&[u8]> {
        self.peer_ca.as_deref().or_else(|| self.tls.as_ref().and_then(TlsSettings::ca_pem))
    }

    /// TLS of the Raft port: mutual when a peer CA is known.
    pub fn raft_port_tls(&self) -> Result<Option<ServerTlsConfig>, SecurityError> {
        sluice_security::install_crypto_provider();
        let Some(tls) = &self.tls else { return Ok(None) };
        match self.peer_ca() {
            Some(ca) => Ok(Some(tls.mutual_server_config(ca)?)),
            None => Ok(Some(tls.server_config()?)),
        }
    }

    /// How this node dials its peers' Raft ports.
    pub fn peer_client(&self) -> Result<ClientSecurity, SecurityError> {
        let tls = self.tls.as_ref().map(|t| match self.peer_ca() {
            Some(ca) => TlsSettings::from_pem(t.identity_pem(), Some(ca.to_vec()))
                .with_server_name(t.server_name()),
            None => Ok(t.clone()),
        });
        let tls = tls.transpose()?;
        ClientSecurity::new(tls.as_ref(), self.peer_secret.as_ref())
    }

    /// The flags whose protection the client port lacks.
    pub fn missing_on_client_port(&self) -> Vec<&'static str> {
        sluice_security::missing_protections(self.tls.as_ref(), self.tokens.is_some())
    }

    /// The flags whose protection the Raft port lacks: a peer identity of its
    /// own, the peer secret or a peer CA other than `--tls-ca`
    /// ([`sluice_security::missing_peer_identity`]).
    pub fn missing_on_raft_port(&self) -> Vec<&'static str> {
        let (tls, peer_ca) = (self.tls.as_ref(), self.peer_ca.as_deref());
        sluice_security::missing_peer_identity(tls, peer_ca, self.peer_secret.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_rpcs_need_the_worker_role_and_the_rest_the_client_role() {
        for m in ["RegisterWorker", "WorkerHeartbeat", "GetSplit"] {
            assert_eq!(role_of(&format!("/sluice.v1.Dispatcher/{m}")), Role::Worker, "{m}");
        }
        for m in
            ["RegisterDataset", "GetOrCreateJob", "ClientHeartbeat", "GetStatus", "MaybeRemoveTask"]
        {
            assert_eq!(role_of(&format!("/sluice.v1.Dispatcher/{m}")), Role::Client, "{m}");
        }
    }

    #[test]
    fn nothing_configured_lacks_everything() {
        let s = DispatcherSecurity::default();
        assert_eq!(s.missing_on_client_port(), ["--tls-cert/--tls-key", "--auth-tokens"]);
        assert_eq!(s.missing_on_raft_port().len(), 1);
        let s = DispatcherSecurity {
            peer_secret: Some(Secret::parse("pppppppppppppppppppp").unwrap()),
            ..Default::default()
        };
        assert!(s.missing_on_raft_port().is_empty());
    }
}
