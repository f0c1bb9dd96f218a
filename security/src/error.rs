//! [`SecurityError`]: what is wrong with a security setting. Each message names
//! the flag (or file and line) to fix.

use std::path::PathBuf;

/// The form a server address must have (`crate::address`), for error messages.
pub const ADDRESS_FORM: &str =
    "HOST:PORT (a host name or an IP address, `[IPv6]:PORT` for IPv6, a port in 1..=65535, \
     no scheme and no path)";

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file named by a flag could not be read.
    /// (`error` is in the message, and not a `source`, so a report that prints
    /// the chain does not repeat it.)
    #[error("{flag} {}: cannot read it: {error}", path.display())]
    Read { flag: &'static str, path: PathBuf, error: std::io::Error },
    /// A file was read but its content is not what the flag needs.
    #[error("{flag} {}: {reason}", path.display())]
    BadFile { flag: &'static str, path: PathBuf, reason: String },
    /// A line of a token file is malformed.
    #[error("{flag} {} line {line}: {reason}", path.display())]
    TokenLine { flag: &'static str, path: PathBuf, line: usize, reason: String },
    /// A secret given directly (an environment variable) is malformed.
    #[error("{source_name}: {reason}")]
    BadSecret { source_name: String, reason: String },
    /// Settings that only make sense together were given apart.
    #[error("{0}")]
    Incomplete(String),
    /// The TLS library refused the certificates or key.
    #[error("TLS settings ({what}): {reason}")]
    Tls { what: &'static str, reason: String },
    /// A server address that is not `HOST:PORT` (`crate::address`).
    #[error("`{address}` is not a server address: {reason}; give {}", ADDRESS_FORM)]
    Address { address: String, reason: String },
    /// An address whose scheme contradicts the client's TLS setting, or is not
    /// one Sluice speaks.
    #[error("{0}")]
    Scheme(String),
    /// A server would listen off loopback without the protection it needs.
    #[error("{0}")]
    Insecure(String),
}
