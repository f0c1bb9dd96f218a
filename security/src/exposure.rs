//! Secure by default off loopback. A server listening only on loopback is
//! reachable only from its own host, whose users are trusted as much as the
//! process itself; any other listen address (a real interface, `0.0.0.0`, a host
//! name) may be reached by anyone on the network, so the server refuses to start
//! there without TLS and tokens unless told `--insecure`, which it logs loudly.
//! The check runs before the socket is bound.

use std::net::{IpAddr, SocketAddr};

use crate::error::SecurityError;

/// Whether `addr` is a loopback address (127.0.0.0/8, ::1).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Whether `host` (an IP, `[v6]`, or a name) names loopback. Only `localhost` is
/// trusted among names: any other name may resolve anywhere.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// The flags a server's client-facing port lacks: a certificate to serve TLS
/// with (`tls`), and a token file (`tokens`).
pub fn missing_protections(tls: Option<&crate::TlsSettings>, tokens: bool) -> Vec<&'static str> {
    let mut missing = vec![];
    if !tls.is_some_and(|t| t.has_identity()) {
        missing.push("--tls-cert/--tls-key");
    }
    if !tokens {
        missing.push("--auth-tokens");
    }
    missing
}

/// What a Raft port lacks to tell a dispatcher peer from any other holder of a
/// certificate: a peer secret every Raft RPC carries (`peer_secret`), or mutual
/// TLS against a peer CA (`peer_ca`) that is not the CA of clients' and workers'
/// certificates (`tls`'s CA). Mutual TLS against `--tls-ca` alone is not enough:
/// every worker's and client's certificate of that CA would pass it and could
/// vote or append entries (issue 31: one moved a group's term to 10^6).
pub fn missing_peer_identity(
    tls: Option<&crate::TlsSettings>,
    peer_ca: Option<&[u8]>,
    peer_secret: bool,
) -> Vec<&'static str> {
    let own_ca = |ca: &[u8]| match tls.and_then(|t| t.ca_pem()) {
        Some(tls_ca) => !crate::tls::same_certificates(ca, tls_ca),
        None => true,
    };
    let mutual = tls.is_some_and(|t| t.has_identity()) && peer_ca.is_some_and(own_ca);
    if peer_secret || mutual {
        vec![]
    } else {
        vec![
            "--peer-secret-file, or --peer-ca naming a CA other than --tls-ca that signs \
             only dispatchers' certificates (with --tls-cert/--tls-key)",
        ]
    }
}

/// Refuses a `server` listening on `host` off loopback while `missing` (the
/// flags of the protections it lacks) is not empty, unless `insecure`; then it
/// warns.
pub fn require_secure_off_loopback(
    server: &str,
    host: &str,
    missing: &[&str],
    insecure: bool,
) -> Result<(), SecurityError> {
    if missing.is_empty() || is_loopback_host(host) {
        return Ok(());
    }
    let list = missing.join(", ");
    if insecure {
        tracing::warn!(
            "INSECURE: the {server} listens on {host}, which is not loopback, without {list} \
             (--insecure): anyone who can reach it can use it"
        );
        return Ok(());
    }
    Err(SecurityError::Insecure(format!(
        "the {server} would listen on {host}, which is not loopback, without {list}: give \
         them (docs/security.md, \"Identity and transport\"), listen on 127.0.0.1, or pass \
         --insecure to run unprotected on a network you trust"
    )))
}

/// Refuses to run users' Python code (`--allow-python`) on a worker that serves
/// off loopback without authenticating its callers (`tokens`): the elements it
/// computes from user code go only to authenticated readers, and such a worker is
/// meant for a network that is not trusted. Unlike the other checks, `--insecure`
/// does not lift this one.
pub fn require_auth_for_user_code(host: &str, tokens: bool) -> Result<(), SecurityError> {
    if tokens || is_loopback_host(host) {
        return Ok(());
    }
    Err(SecurityError::Insecure(format!(
        "--allow-python: the worker would run users' Python code while listening on {host}, \
         which is not loopback, without authentication: give --auth-tokens (and \
         --tls-cert/--tls-key), or listen on 127.0.0.1; --insecure does not lift this \
         (docs/python-stages.md, \"Operating it\")"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_code_off_loopback_needs_tokens() {
        assert!(require_auth_for_user_code("127.0.0.1", false).is_ok());
        assert!(require_auth_for_user_code("0.0.0.0", true).is_ok());
        let e = require_auth_for_user_code("0.0.0.0", false).unwrap_err().to_string();
        assert!(e.contains("--allow-python") && e.contains("--auth-tokens"), "{e}");
    }

    #[test]
    fn a_raft_port_needs_a_peer_secret_or_a_peer_ca_of_its_own() {
        let ca = |name: &str| {
            let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(rcgen::DnType::CommonName, name);
            let key = rcgen::KeyPair::generate().unwrap();
            params.self_signed(&key).unwrap().pem().into_bytes()
        };
        let (client_ca, peer_ca) = (ca("clients"), ca("peers"));
        let identity = Some((b"cert".to_vec(), b"key".to_vec()));
        let tls = crate::TlsSettings::from_pem(identity, Some(client_ca.clone()));
        // mTLS against the client CA alone: any worker's certificate would pass.
        assert_eq!(missing_peer_identity(Some(&tls), None, false).len(), 1);
        let same = missing_peer_identity(Some(&tls), Some(&client_ca), false);
        assert!(same[0].contains("--peer-ca") && same[0].contains("--peer-secret-file"));
        // The same CA written differently (CRLF line ends) is still the same CA.
        let crlf = String::from_utf8(client_ca.clone()).unwrap().replace('\n', "\r\n");
        assert_eq!(missing_peer_identity(Some(&tls), Some(crlf.as_bytes()), false).len(), 1);
        assert!(missing_peer_identity(Some(&tls), Some(&peer_ca), false).is_empty());
        assert!(missing_peer_identity(Some(&tls), None, true).is_empty());
        assert!(missing_peer_identity(None, Some(&peer_ca), false).len() == 1, "no identity");
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for h in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["0.0.0.0", "::", "10.0.0.1", "example.com", "192.168.1.1"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn off_loopback_without_protection_is_refused_naming_the_flags() {
        let err = require_secure_off_loopback("dispatcher", "0.0.0.0", &["--tls-cert"], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("0.0.0.0") && err.contains("--tls-cert"), "{err}");
        assert!(err.contains("--insecure"), "{err}");
        require_secure_off_loopback("dispatcher", "0.0.0.0", &["--tls-cert"], true).unwrap();
        require_secure_off_loopback("dispatcher", "127.0.0.1", &["--tls-cert"], false).unwrap();
        require_secure_off_loopback("dispatcher", "0.0.0.0", &[], false).unwrap();
    }
}
