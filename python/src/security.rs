//! The security keywords of the Python API (docs/security.md), turned into the
//! crates' settings: file paths as the `sluice` flags take them, tokens as
//! strings. A bad file or token is `InvalidArgumentError` naming it (never the
//! secret).

use std::path::PathBuf;

use pyo3::PyResult;
use sluice_dispatcher::DispatcherSecurity;
use sluice_security::{ClientSecurity, Secret, SecurityError, TlsSettings, TokenSet};
use sluice_worker::WorkerSecurity;

use crate::errors;

fn invalid(e: SecurityError) -> pyo3::PyErr {
    errors::invalid_argument(e.to_string())
}

/// `tls_cert`, `tls_key`, `tls_ca` (PEM files), and the server name every server is
/// verified against when `SLUICE_TLS_SERVER_NAME` is set (as `--tls-server-name`).
pub fn tls(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    ca: Option<PathBuf>,
) -> PyResult<Option<TlsSettings>> {
    let settings =
        TlsSettings::from_files(cert.as_deref(), key.as_deref(), ca.as_deref()).map_err(invalid)?;
    let name = std::env::var("SLUICE_TLS_SERVER_NAME").ok();
    match settings {
        Some(s) => s.with_server_name(name.as_deref()).map(Some).map_err(invalid),
        None => Ok(None),
    }
}

/// `auth_tokens` (a token file).
pub fn tokens(path: Option<PathBuf>) -> PyResult<Option<TokenSet>> {
    path.map(|p| TokenSet::from_file("auth_tokens", &p)).transpose().map_err(invalid)
}

/// `token` (the secret itself).
pub fn secret(token: Option<&str>) -> PyResult<Option<Secret>> {
    token.map(|t| Secret::from_value("token", t)).transpose().map_err(invalid)
}

/// What a client presents: `tls_ca` and `token`.
pub fn client(tls_ca: Option<PathBuf>, token: Option<&str>) -> PyResult<ClientSecurity> {
    let tls = tls(None, None, tls_ca)?;
    ClientSecurity::new(tls.as_ref(), secret(token)?.as_ref()).map_err(invalid)
}

/// The keywords of `DispatchServer` and `start_quorum`.
#[derive(Default)]
pub struct DispatcherKeywords {
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub auth_tokens: Option<PathBuf>,
    pub peer_ca: Option<PathBuf>,
    pub peer_secret_file: Option<PathBuf>,
}

impl DispatcherKeywords {
    pub fn security(self) -> PyResult<DispatcherSecurity> {
        let peer_ca = self
            .peer_ca
            .map(|p| sluice_security::tls::read_pem("peer_ca", &p, "CERTIFICATE"))
            .transpose()
            .map_err(invalid)?;
        let peer_secret = self
            .peer_secret_file
            .map(|p| Secret::from_file("peer_secret_file", &p))
            .transpose()
            .map_err(invalid)?;
        Ok(DispatcherSecurity {
            tls: tls(self.tls_cert, self.tls_key, self.tls_ca)?,
            tokens: tokens(self.auth_tokens)?,
            peer_ca,
            peer_secret,
            insecure: false,
        })
    }
}

/// The keywords of `WorkerServer`.
pub fn worker(
    tls_files: (Option<PathBuf>, Option<PathBuf>, Option<PathBuf>),
    auth_tokens: Option<PathBuf>,
    token: Option<&str>,
) -> PyResult<WorkerSecurity> {
    Ok(WorkerSecurity {
        tls: tls(tls_files.0, tls_files.1, tls_files.2)?,
        tokens: tokens(auth_tokens)?,
        token: secret(token)?,
        insecure: false,
    })
}
