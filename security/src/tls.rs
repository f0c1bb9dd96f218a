//! [`TlsSettings`]: a certificate, its key and a CA, read from PEM files once at
//! start-up (so a bad file fails the process before it serves, naming the flag),
//! and turned into tonic's TLS configurations.
//!
//! - A server needs the certificate and key (`--tls-cert`, `--tls-key`).
//! - A client needs the CA (`--tls-ca`) to verify the server; it presents its
//!   own certificate and key when it has them (a dispatcher dialling its Raft
//!   peers, which require one).
//! - The Raft listener also requires a client certificate verified against the
//!   peer CA ([`TlsSettings::mutual_server_config`]).
//! - A client may verify every server against one fixed name
//!   (`--tls-server-name`, [`TlsSettings::with_server_name`]) instead of the host it
//!   dials: workers advertise addresses no certificate can name in advance (a
//!   Kubernetes pod's IP), so a deployment gives each of its servers a certificate
//!   for one shared name (docs/operations.md, "TLS in Kubernetes").

use std::path::Path;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::error::SecurityError;

/// PEM contents of the TLS flags.
#[derive(Clone)]
pub struct TlsSettings {
    cert_and_key: Option<(Vec<u8>, Vec<u8>)>,
    ca: Option<Vec<u8>>,
    server_name: Option<String>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsSettings")
            .field("identity", &self.cert_and_key.is_some())
            .field("ca", &self.ca.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// Reads `path` and checks it holds a PEM block of `kind` (e.g. `CERTIFICATE`).
pub fn read_pem(flag: &'static str, path: &Path, kind: &str) -> Result<Vec<u8>, SecurityError> {
    let bytes = std::fs::read(path).map_err(|error| SecurityError::Read {
        flag,
        path: path.to_path_buf(),
        error,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{kind}-----")));
    if !found {
        return Err(SecurityError::BadFile {
            flag,
            path: path.to_path_buf(),
            reason: format!("no PEM `{kind}` block in it (give a PEM file)"),
        });
    }
    Ok(bytes)
}

/// Whether the PEM files `a` and `b` hold the same certificates (in any order,
/// whatever their formatting): two flags naming one CA.
pub fn same_certificates(a: &[u8], b: &[u8]) -> bool {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let ders = |pem: &[u8]| -> Option<std::collections::BTreeSet<Vec<u8>>> {
        CertificateDer::pem_slice_iter(pem).map(|c| c.ok().map(|c| c.to_vec())).collect()
    };
    match (ders(a), ders(b)) {
        (Some(a), Some(b)) if !a.is_empty() => a == b,
        // Unparsable (refused later, when TLS is built): compare the bytes.
        _ => a == b,
    }
}

impl TlsSettings {
    /// The settings of `--tls-cert`, `--tls-key` and `--tls-ca`; `None` when none
    /// is given (plain-text transport).
    pub fn from_files(
        cert: Option<&Path>,
        key: Option<&Path>,
        ca: Option<&Path>,
    ) -> Result<Option<TlsSettings>, SecurityError> {
        let cert_and_key = match (cert, key) {
            (Some(c), Some(k)) => Some((
                read_pem("--tls-cert", c, "CERTIFICATE")?,
                read_pem("--tls-key", k, "PRIVATE KEY")?,
            )),
            (None, None) => None,
            (Some(_), None) => {
                return Err(SecurityError::Incomplete(
                    "--tls-cert was given without --tls-key: give both (PEM files)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(SecurityError::Incomplete(
                    "--tls-key was given without --tls-cert: give both (PEM files)".into(),
                ))
            }
        };
        let ca = ca.map(|p| read_pem("--tls-ca", p, "CERTIFICATE")).transpose()?;
        if cert_and_key.is_none() && ca.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsSettings { cert_and_key, ca, server_name: None }))
    }

    /// Settings from PEM contents already in memory (the Python package, tests).
    pub fn from_pem(cert_and_key: Option<(Vec<u8>, Vec<u8>)>, ca: Option<Vec<u8>>) -> Self {
        TlsSettings { cert_and_key, ca, server_name: None }
    }

    /// Verify servers against `name` instead of the host dialled (`--tls-server-name`).
    /// An empty name is refused: it would match no certificate.
    pub fn with_server_name(mut self, name: Option<&str>) -> Result<Self, SecurityError> {
        match name.map(str::trim) {
            Some("") => {
                return Err(SecurityError::Incomplete(
                    "--tls-server-name is empty: give the DNS name every server's \
                     certificate carries, or leave it out"
                        .into(),
                ))
            }
            Some(n) => self.server_name = Some(n.to_string()),
            None => self.server_name = None,
        }
        Ok(self)
    }

    /// The name servers are verified against, if fixed.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Whether a certificate and key are set (this side can serve TLS).
    pub fn has_identity(&self) -> bool {
        self.cert_and_key.is_some()
    }

    /// Whether a CA is set (this side can verify a server).
    pub fn has_ca(&self) -> bool {
        self.ca.is_some()
    }

    /// The certificate and key PEM, if set.
    pub fn identity_pem(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.cert_and_key.clone()
    }

    /// The CA's PEM, if set.
    pub fn ca_pem(&self) -> Option<&[u8]> {
        self.ca.as_deref()
    }

    fn identity(&self, role: &str) -> Result<Identity, SecurityError> {
        let (cert, key) = self.cert_and_key.as_ref().ok_or_else(|| {
            SecurityError::Incomplete(format!(
                "TLS {role} needs a certificate and key: give --tls-cert and --tls-key"
            ))
        })?;
        Ok(Identity::from_pem(cert, key))
    }

    /// A server's TLS: its certificate; clients are not asked for one.
    pub fn server_config(&self) -> Result<ServerTlsConfig, SecurityError> {
        Ok(ServerTlsConfig::new().identity(self.identity("serving")?))
    }

    /// A server's TLS that also requires every client to present a certificate
    /// signed by `client_ca` (PEM): the Raft listener's mutual TLS.
    pub fn mutual_server_config(&self, client_ca: &[u8]) -> Result<ServerTlsConfig, SecurityError> {
        Ok(self
            .server_config()?
            .client_ca_root(Certificate::from_pem(client_ca))
            .client_auth_optional(false))
    }

    /// The certificate and key as a rustls server configuration speaking HTTP/1.1:
    /// the metrics and status listener's TLS (`sluice-metrics`).
    pub fn http_server_config(
        &self,
    ) -> Result<std::sync::Arc<rustls::ServerConfig>, SecurityError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        crate::install_crypto_provider();
        let bad = |reason: String| SecurityError::Tls { what: "metrics server", reason };
        let (cert, key) = self.cert_and_key.as_ref().ok_or_else(|| {
            SecurityError::Incomplete(
                "TLS serving needs a certificate and key: give --tls-cert and --tls-key".into(),
            )
        })?;
        let certs = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(format!("--tls-cert: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad(format!("--tls-key: {e}")))?;
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(std::sync::Arc::new(config))
    }

    /// A client's TLS: verify the server against the CA; present this side's
    /// certificate when it has one.
    pub fn client_config(&self) -> Result<ClientTlsConfig, SecurityError> {
        let ca = self.ca.as_ref().ok_or_else(|| {
            SecurityError::Incomplete(
                "dialling over TLS needs the CA that signed the server's certificate: \
                 give --tls-ca (or SLUICE_TLS_CA)"
                    .into(),
            )
        })?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some(name) = &self.server_name {
            config = config.domain_name(name.clone());
        }
        if self.cert_and_key.is_some() {
            config = config.identity(self.identity("client authentication")?);
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn nothing_given_is_plain_text() {
        assert!(TlsSettings::from_files(None, None, None).unwrap().is_none());
    }

    #[test]
    fn a_cert_without_its_key_names_the_missing_flag() {
        let dir = tempfile::tempdir().unwrap();
        let cert =
            write(&dir, "c.pem", "-----BEGIN CERTIFICATE-----\nAA\n-----END CERTIFICATE-----\n");
        let err = TlsSettings::from_files(Some(&cert), None, None).unwrap_err().to_string();
        assert!(err.contains("--tls-key"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_pem_is_refused_naming_flag_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let ca = write(&dir, "ca.pem", "not a certificate");
        let err = TlsSettings::from_files(None, None, Some(&ca)).unwrap_err().to_string();
        assert!(err.contains("--tls-ca") && err.contains("ca.pem"), "{err}");
    }

    #[test]
    fn a_missing_file_is_refused_naming_flag_and_path() {
        let err = TlsSettings::from_files(None, None, Some(Path::new("/nonexistent/ca.pem")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("--tls-ca") && err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn a_client_without_a_ca_is_told_to_give_one() {
        let s = TlsSettings::from_pem(Some((b"c".to_vec(), b"k".to_vec())), None);
        let err = s.client_config().unwrap_err().to_string();
        assert!(err.contains("--tls-ca"), "{err}");
        let s = TlsSettings::from_pem(None, Some(b"ca".to_vec()));
        let err = s.server_config().unwrap_err().to_string();
        assert!(err.contains("--tls-cert") && err.contains("--tls-key"), "{err}");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let s = TlsSettings::from_pem(Some((b"CERT".to_vec(), b"SECRETKEY".to_vec())), None);
        assert!(!format!("{s:?}").contains("SECRETKEY"));
    }
}
