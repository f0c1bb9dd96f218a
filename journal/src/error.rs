//! [`JournalError`], the crate's one error type.
//!
//! Each variant carries the decision the caller has to make: `Corrupt`, `UnsupportedVersion`
//! and `Fenced` mean "do not start / stop writing, a human must look"; `Io { retryable }` says
//! whether trying again may help; `InvalidArgument` is a bug in the caller.

use std::error::Error as StdError;

/// Everything that can go wrong in a journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A record failed its checksum or framing away from the tail: refuse to start.
    #[error(
        "journal {location} is corrupt at offset {offset}: {reason}; refusing to start. \
         Restore this node's journal from a backup, or delete it and let the node rejoin \
         and catch up from its peers"
    )]
    Corrupt { location: String, offset: u64, reason: String },

    /// Another writer (a stale process with the same node id, or a newer one) owns this journal.
    #[error(
        "journal {location} is fenced: another writer took it over ({detail}); this handle \
         refuses every further write. Check that only one process runs with this node id"
    )]
    Fenced { location: String, detail: String },

    /// The journal was written by a newer (or unknown) format version. Reported at open,
    /// before anything is written.
    #[error("{}", unsupported_version(location, *found, *supported))]
    UnsupportedVersion { location: String, found: u32, supported: u32 },

    /// The location string could not be understood.
    #[error("invalid journal location: {0}")]
    InvalidLocation(String),

    /// Misuse by the caller, e.g. a non-contiguous append.
    #[error("invalid journal call: {0}")]
    InvalidArgument(String),

    /// I/O or remote-store failure; `retryable` says whether trying again may succeed.
    #[error("journal {location}: I/O error ({}): {source}", if *retryable { "retryable" } else { "permanent" })]
    Io { location: String, retryable: bool, source: Box<dyn StdError + Send + Sync> },
}

impl JournalError {
    /// Shorthand for an `Io` error.
    pub(crate) fn io(
        location: impl Into<String>,
        retryable: bool,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        JournalError::Io { location: location.into(), retryable, source: source.into() }
    }

    /// Whether trying the same call again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, JournalError::Io { retryable: true, .. })
    }
}

fn unsupported_version(location: &str, found: u32, supported: u32) -> String {
    if found > supported {
        format!(
            "work_dir {location} was written by a newer Sluice (journal format {found}, this \
             build reads up to {supported}): upgrade this binary or restore a backup; nothing \
             was changed"
        )
    } else {
        format!(
            "journal {location} has format version {found}, which no Sluice build wrote (this \
             build reads {supported}): restore a backup; nothing was changed"
        )
    }
}
