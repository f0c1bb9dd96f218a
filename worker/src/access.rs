//! Who may talk to a worker, and how it talks to the dispatcher
//! (docs/security.md, "Identity and transport").
//!
//! Every route of the worker's port — the generated methods and the hand-written
//! GetElements (`route`) alike — sits behind one [`Guard`] that wants a `client`
//! token: only readers call a worker. The worker itself presents its `worker`
//! token, over TLS when it has a CA, to the dispatcher.

use sluice_security::{ClientSecurity, Guard, Role, Secret, SecurityError, TlsSettings, TokenSet};
use tonic::transport::ServerTlsConfig;

/// A worker's TLS and credentials; the default is none (loopback only).
#[derive(Clone, Debug, Default)]
pub struct WorkerSecurity {
    /// `--tls-cert`/`--tls-key` serve the worker's port over TLS; `--tls-ca`
    /// verifies the dispatcher.
    pub tls: Option<TlsSettings>,
    /// `--auth-tokens`: the client tokens accepted on element streams (lines of
    /// other roles are never accepted here).
    pub tokens: Option<TokenSet>,
    /// `--token-file` / `SLUICE_TOKEN`: this worker's `worker` token, presented
    /// to the dispatcher.
    pub token: Option<Secret>,
    /// `--insecure`: serve off loopback without TLS and tokens.
    pub insecure: bool,
}

impl WorkerSecurity {
    /// The guard of the worker's port.
    pub fn guard(&self) -> Guard {
        Guard::from_tokens(self.tokens.clone(), |_| Role::Client, "worker")
    }

    /// TLS of the worker's port, if configured.
    pub fn server_tls(&self) -> Result<Option<ServerTlsConfig>, SecurityError> {
        sluice_security::install_crypto_provider();
        self.tls.as_ref().map(TlsSettings::server_config).transpose()
    }

    /// How the worker dials the dispatcher: TLS when it has a CA, its token.
    pub fn dispatcher_client(&self) -> Result<ClientSecurity, SecurityError> {
        let tls = self.tls.as_ref().filter(|t| t.has_ca());
        ClientSecurity::new(tls, self.token.as_ref())
    }

    /// The flags whose protection the worker's port lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        sluice_security::missing_protections(self.tls.as_ref(), self.tokens.is_some())
    }
}
