//! [`ServerAddress`]: the one parser of a Sluice server's address, `HOST:PORT`.
//!
//! Why one place: a worker advertises the address readers dial, and a reader
//! configured for TLS must never be steered to plain text by it (issue 31: an
//! advertised `http://…` made readers send their token in clear), nor fail every
//! read on an address that does not parse. So a worker checks its `--advertise`
//! when it starts, the dispatcher checks it again at RegisterWorker, and every
//! client builds the URL it dials here ([`crate::ClientSecurity::url`]).
//!
//! The form: a host name (RFC 1123 labels) or an IPv4 address, or an IPv6
//! address in brackets, then `:` and a port in 1..=65535. No scheme, no path, no
//! white space.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::SecurityError;
pub use crate::error::ADDRESS_FORM;

/// A parsed `HOST:PORT`. Displays as it was given (IPv6 in brackets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddress {
    /// The host as written: a name, an IPv4 address, or `[IPv6]`.
    host: String,
    port: u16,
}

impl ServerAddress {
    /// Parses `address` (see [`ADDRESS_FORM`]); Err names the address and what is
    /// wrong with it.
    pub fn parse(address: &str) -> Result<ServerAddress, SecurityError> {
        let bad = |reason: String| SecurityError::Address { address: address.to_string(), reason };
        if address.contains("://") {
            return Err(bad("it has a scheme".into()));
        }
        if let Some(c) = address.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(format!("it contains {c:?}")));
        }
        if address.contains('/') {
            return Err(bad("it has a path".into()));
        }
        let (host, port) = if let Some(rest) = address.strip_prefix('[') {
            let (inside, after) =
                rest.split_once(']').ok_or_else(|| bad("`[` without its `]`".into()))?;
            inside
                .parse::<Ipv6Addr>()
                .map_err(|_| bad(format!("`{inside}` is not an IPv6 address")))?;
            let port = after.strip_prefix(':').ok_or_else(|| bad("no `:PORT`".into()))?;
            (&address[..inside.len() + 2], port)
        } else {
            let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("no `:PORT`".into()))?;
            if host.contains(':') {
                return Err(bad("an IPv6 address needs brackets: `[IPv6]:PORT`".into()));
            }
            check_host(host).map_err(bad)?;
            (host, port)
        };
        let port = match port.parse::<u32>() {
            Ok(p @ 1..=65535) => p as u16,
            Ok(p) => return Err(bad(format!("port {p} is not in 1..=65535"))),
            Err(_) => return Err(bad(format!("port `{port}` is not a number"))),
        };
        Ok(ServerAddress { host: host.to_string(), port })
    }

    /// Parses `address`, which may carry the scheme that matches `tls` (whether
    /// TLS is in use: `https://`, else `http://`). A scheme that contradicts it is
    /// refused, never followed: a plain-text address must not make a TLS client
    /// send its token in clear (issue 31), and an `https://` one cannot be dialled
    /// without a CA to verify it.
    pub fn parse_for(address: &str, tls: bool) -> Result<ServerAddress, SecurityError> {
        let Some((scheme, rest)) = address.split_once("://") else {
            return ServerAddress::parse(address);
        };
        let scheme = scheme.to_ascii_lowercase();
        let refuse = |why: String| Err(SecurityError::Scheme(format!("`{address}`: {why}")));
        match (scheme.as_str(), tls) {
            ("https", true) | ("http", false) => {
                ServerAddress::parse(rest.strip_suffix('/').unwrap_or(rest))
            }
            ("http", true) => refuse(
                "a plain-text (http://) address where TLS is in use (--tls-ca): Sluice never \
                 dials in plain text then, so a token is never sent in clear; give the \
                 address as HOST:PORT (or https://HOST:PORT)"
                    .into(),
            ),
            ("https", false) => refuse(
                "asks for TLS (https://) where none is configured: give --tls-ca (or \
                 SLUICE_TLS_CA), or the address as HOST:PORT"
                    .into(),
            ),
            (other, _) => {
                refuse(format!("unknown scheme `{other}://`; give the address as HOST:PORT"))
            }
        }
    }

    /// The host as written (`[…]` around an IPv6 address).
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl std::fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl std::str::FromStr for ServerAddress {
    type Err = SecurityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ServerAddress::parse(s)
    }
}

/// An IPv4 address or a host name: labels of letters, digits and `-` (not at
/// either end), 1 to 63 bytes each, 253 in all, the last not all digits (that
/// would be a malformed IPv4 address).
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    if host.parse::<Ipv4Addr>().is_ok() {
        return Ok(());
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.len() > 253 {
        return Err("the host name is longer than 253 bytes".into());
    }
    for label in name.split('.') {
        let ok_chars = label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if label.is_empty() || label.len() > 63 || !ok_chars {
            return Err(format!("`{host}` is not a valid host name or IP address"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("`{host}` is not a valid host name (a label ends with `-`)"));
        }
    }
    if name.rsplit('.').next().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("`{host}` is not a valid IP address"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms_parse_and_display_as_given() {
        for a in [
            "127.0.0.1:5050",
            "localhost:1",
            "worker-0.sluice.svc.cluster.local:65535",
            "[::1]:80",
            "[fe80::1]:443",
            "example.com.:8080",
        ] {
            assert_eq!(ServerAddress::parse(a).unwrap().to_string(), a);
        }
        let a = ServerAddress::parse("[::1]:80").unwrap();
        assert_eq!((a.host(), a.port()), ("[::1]", 80));
    }

    #[test]
    fn malformed_addresses_are_refused_saying_why() {
        for (a, why) in [
            ("http://127.0.0.1:1", "scheme"),
            ("not an address", "' '"),
            ("127.0.0.1:99999", "port 99999 is not in 1..=65535"),
            ("127.0.0.1:0", "port 0"),
            ("127.0.0.1", "no `:PORT`"),
            ("127.0.0.1:x", "not a number"),
            ("::1:80", "needs brackets"),
            ("[::1:80", "without its `]`"),
            ("[nope]:80", "not an IPv6"),
            ("host:80/path", "path"),
            (":80", "empty"),
            ("999.1.1.1:80", "not a valid IP"),
            ("-bad.example:80", "label ends"),
            ("a_b:80", "not a valid host"),
        ] {
            let e = ServerAddress::parse(a).unwrap_err().to_string();
            assert!(e.contains(why), "{a}: {e}");
            assert!(e.contains(a) && e.contains("HOST:PORT"), "{a}: {e}");
        }
    }
}
