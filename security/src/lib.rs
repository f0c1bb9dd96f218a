//! Sluice's transport security: who may open a connection, and who may call what.
//!
//! Every gRPC listener of Sluice (a dispatcher's client port, its Raft port, a
//! worker's port) and every client of one uses what this crate builds; the crate
//! knows nothing of Sluice's services beyond a policy function that maps a
//! request path to the [`Role`] it needs (docs/security.md, "Identity and
//! transport").
//!
//! # Layout
//! - [`tls`]: [`TlsSettings`] — certificate, key and CA read from PEM files, turned
//!   into tonic's server and client TLS configurations (rustls with ring).
//! - [`tokens`]: [`Secret`], [`Role`] and [`TokenSet`] — the token file
//!   (`ROLE NAME SECRET` lines) and the constant-time lookup of a presented secret.
//! - [`guard`]: [`Guard`] — the tower layer a server mounts: it checks
//!   `authorization: Bearer …` against the [`TokenSet`] for the role the path
//!   needs, answers `Unauthenticated` / `PermissionDenied` naming what is missing
//!   or wrong (never the secret), and hands the [`Caller`] to the service in the
//!   request's extensions.
//! - [`address`]: [`ServerAddress`] — the one parser of `HOST:PORT`, used by
//!   clients, by a worker for its `--advertise`, and by the dispatcher at
//!   RegisterWorker.
//! - [`client`]: [`ClientSecurity`] — what a client presents: TLS (dial `https://`)
//!   and its bearer token, added to every request by [`Bearer`].
//! - [`exposure`]: the loopback test and "secure by default off loopback".
//! - [`incoming`]: [`Incoming`] — the accept loop every server serves from:
//!   connections bounded in all and per IP, silent ones closed, accept errors
//!   backed off.
//! - [`health_port`]: the plain-text, health-only listener for orchestrators'
//!   probes (`--health-addr`).
//! - [`error`] — [`SecurityError`].
//!
//! ```text
//!  files ─► TlsSettings ─► ServerTlsConfig (listener) / ClientTlsConfig (ClientSecurity)
//!  token file ─► TokenSet ─► Guard (layer on a server) ─► Caller in the extensions
//!  token ─► Secret ─► Bearer (client interceptor) ─► `authorization: Bearer …`
//! ```

pub mod address;
pub mod client;
pub mod error;
pub mod exposure;
pub mod guard;
pub mod health_port;
pub mod incoming;
pub mod tls;
pub mod tokens;

pub use address::ServerAddress;
pub use client::{Bearer, ClientSecurity};
pub use error::SecurityError;
pub use exposure::{
    is_loopback, is_loopback_host, missing_peer_identity, missing_protections,
    require_auth_for_user_code, require_secure_off_loopback,
};
pub use guard::{Caller, Guard};
pub use incoming::Incoming;
pub use tls::TlsSettings;
pub use tokens::{Role, Secret, TokenSet};

/// Installs rustls' ring provider as the process default (once; later calls do
/// nothing). tonic's server TLS builds its config from the process default.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
