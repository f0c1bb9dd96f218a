//! The security flags (docs/security.md, "Identity and transport"): TLS files,
//! the token a client or worker presents, the token file a server checks, and
//! the Raft port's peer authentication. Each has an environment variable.

use std::path::PathBuf;

use clap::Args;
use sluice_security::{Secret, SecurityError, TlsSettings, TokenSet};

/// TLS files. A server serves with the certificate and key; a client (or a
/// server dialling another) verifies with the CA, and dials `https://` when given.
#[derive(Args, Clone, Debug, Default)]
pub struct TlsFlags {
    /// PEM certificate this process presents (servers; clients only if asked).
    #[arg(long, env = "SLUICE_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "SLUICE_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA that signed the servers' certificates; dial them over TLS.
    #[arg(long, env = "SLUICE_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Verify every server's certificate against this DNS name instead of the host
    /// dialled (workers advertise pod IPs no certificate names; give each Sluice
    /// server a certificate for NAME). docs/operations.md, "TLS in Kubernetes".
    #[arg(long, env = "SLUICE_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsFlags {
    pub fn settings(&self) -> Result<Option<TlsSettings>, SecurityError> {
        let settings = TlsSettings::from_files(
            self.tls_cert.as_deref(),
            self.tls_key.as_deref(),
            self.tls_ca.as_deref(),
        )?;
        match (settings, &self.tls_server_name) {
            (Some(s), name) => s.with_server_name(name.as_deref()).map(Some),
            (None, Some(_)) => Err(SecurityError::Incomplete(
                "--tls-server-name was given without TLS: give --tls-ca (and, on a server, \
                 --tls-cert and --tls-key) too"
                    .into(),
            )),
            (None, None) => Ok(None),
        }
    }
}

/// The bearer token this process presents.
#[derive(Args, Clone, Debug, Default)]
pub struct TokenFlags {
    /// File holding this process's bearer token (a client's `client` token, a
    /// worker's `worker` token). Or set SLUICE_TOKEN to the token itself.
    #[arg(long, env = "SLUICE_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl TokenFlags {
    pub fn secret(&self) -> Result<Option<Secret>, SecurityError> {
        if let Some(path) = &self.token_file {
            return Secret::from_file("--token-file", path).map(Some);
        }
        match std::env::var("SLUICE_TOKEN") {
            Ok(v) if !v.is_empty() => Secret::from_value("SLUICE_TOKEN", &v).map(Some),
            _ => Ok(None),
        }
    }
}

/// What a server checks.
#[derive(Args, Clone, Debug, Default)]
pub struct ServerAuthFlags {
    /// Token file of the tokens this server accepts: lines `ROLE NAME SECRET`,
    /// ROLE `client` or `worker` (docs/security.md).
    #[arg(long, env = "SLUICE_AUTH_TOKENS", value_name = "FILE")]
    pub auth_tokens: Option<PathBuf>,
    /// Listen off loopback without TLS and tokens (logged as a warning). Only on
    /// a network where everyone who can reach the port is trusted.
    #[arg(long)]
    pub insecure: bool,
}

impl ServerAuthFlags {
    pub fn tokens(&self) -> Result<Option<TokenSet>, SecurityError> {
        self.auth_tokens.as_deref().map(|p| TokenSet::from_file("--auth-tokens", p)).transpose()
    }
}

/// The Raft port's peer authentication.
#[derive(Args, Clone, Debug, Default)]
pub struct PeerFlags {
    /// PEM CA whose certificates the Raft port accepts from peers (mutual TLS);
    /// default: --tls-ca. Off loopback it is the peers' identity only if it is
    /// another CA than --tls-ca, one that signs only dispatchers' certificates;
    /// else give --peer-secret-file.
    #[arg(long, env = "SLUICE_PEER_CA", value_name = "FILE")]
    pub peer_ca: Option<PathBuf>,
    /// File holding a secret every dispatcher of the group shares; every Raft RPC
    /// must carry it.
    #[arg(long, env = "SLUICE_PEER_SECRET_FILE", value_name = "FILE")]
    pub peer_secret_file: Option<PathBuf>,
}

impl PeerFlags {
    pub fn peer_ca(&self) -> Result<Option<Vec<u8>>, SecurityError> {
        self.peer_ca
            .as_deref()
            .map(|p| sluice_security::tls::read_pem("--peer-ca", p, "CERTIFICATE"))
            .transpose()
    }

    pub fn peer_secret(&self) -> Result<Option<Secret>, SecurityError> {
        self.peer_secret_file
            .as_deref()
            .map(|p| Secret::from_file("--peer-secret-file", p))
            .transpose()
    }
}
