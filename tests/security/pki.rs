//! Test certificates and tokens, generated at test time into a temporary
//! directory (no key is committed): a CA and a server certificate it signs (for
//! 127.0.0.1 and localhost, used by every dispatcher and worker), a second CA
//! with a client certificate that the first CA did not sign, a token file, the
//! client's and worker's token files, and the peer secret.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};

pub const CLIENT_TOKEN: &str = "client-secret-0123456789abcdef";
pub const WORKER_TOKEN: &str = "worker-secret-0123456789abcdef";
/// A second worker token (`pool-2`).
pub const OTHER_WORKER_TOKEN: &str = "worker-2-secret-0123456789abcdef";
/// A second client identity (`trainer-2`), for quotas per identity.
pub const OTHER_CLIENT_TOKEN: &str = "client-2-secret-0123456789abcdef";
pub const PEER_SECRET: &str = "peer-secret-0123456789abcdef";

pub struct Pki {
    dir: tempfile::TempDir,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(issuer: &CertifiedIssuer<'static, KeyPair>) -> (String, String) {
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        let main = ca("sluice test CA");
        let (cert, key) = leaf(&main);
        write("ca.pem", &main.pem());
        write("server.pem", &cert);
        write("server.key", &key);
        let other = ca("another CA");
        let (cert, key) = leaf(&other);
        write("other-ca.pem", &other.pem());
        write("stranger.pem", &cert);
        write("stranger.key", &key);
        write(
            "tokens",
            &format!(
                "# role name secret\nclient trainer {CLIENT_TOKEN}\nworker pool {WORKER_TOKEN}\n\
                 worker pool-2 {OTHER_WORKER_TOKEN}\nclient trainer-2 {OTHER_CLIENT_TOKEN}\n"
            ),
        );
        write("client.token", CLIENT_TOKEN);
        write("worker.token", WORKER_TOKEN);
        write("peer.secret", PEER_SECRET);
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
