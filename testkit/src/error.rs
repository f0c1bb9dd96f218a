//! The harness's one error type. A variant about a child names the command and
//! carries the tail of its stderr: a test or a chaos run that fails to start a
//! process shows why the process failed, not only that it did.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(thiserror::Error)]
pub enum Error {
    #[error("starting {what}: {source}")]
    Spawn { what: String, source: std::io::Error },

    #[error("{what} exited ({status}) before printing `listening on ADDR`; {stderr}")]
    ExitedBeforeListening { what: String, status: String, stderr: String },

    #[error("{what} printed {line:?}, not `listening on ADDR`; {stderr}")]
    NotListening { what: String, line: String, stderr: String },

    #[error("{what} did not print `listening on ADDR` within {within:?}; {stderr}")]
    StartTimeout { what: String, within: Duration, stderr: String },

    #[error("{what} did not finish within {within:?}; {stderr}")]
    RunTimeout { what: String, within: Duration, stderr: String },

    #[error("no leader within {within:?}: {roles:?}; {stderr}")]
    NoLeader { within: Duration, roles: BTreeMap<String, String>, stderr: String },

    #[error("the S3 test server is not installed ({} does not exist): run \
             scripts/install-s3-test-server.sh at the repository root (or set \
             SLUICE_MOTO_SERVER to a moto_server binary)", binary.display())]
    MotoMissing { binary: PathBuf },

    #[error("moto_server {what}; {stderr}")]
    MotoNotReady { what: String, stderr: String },

    #[error("no free port in {low}..{high} (below the ephemeral range) after {tries} tries")]
    NoFreePort { low: u16, high: u16, tries: usize },

    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },

    #[error("{signal} to {what}: {source}")]
    Signal { what: String, signal: &'static str, source: nix::Error },

    #[error("{0}")]
    Usage(String),
}

/// The same text as `Display`: tests `unwrap()` these errors, and what they need
/// to show is the message with the child's stderr, not the enum's fields.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { what: what.into(), source }
    }
}
