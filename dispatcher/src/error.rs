//! Errors of the dispatcher crate. `StateError` is what `apply` refuses with (state
//! unchanged); `ProposeError` is why `Core` did not answer a proposal or a leader
//! read; `DispatcherError` is what the server's setup can fail with. The mapping to
//! `tonic::Status` lives in `convert.rs`, in one place.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A command refused by the state machine. The state is unchanged.
#[derive(Debug, Error, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StateError {
    #[error("{what} `{id}` not found{hint}")]
    NotFound { what: String, id: String, hint: String },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
    /// A cap of this dispatcher (a count it holds, or the size of one command)
    /// is reached; the message names the cap and the flag that sets it.
    #[error("{0}")]
    ResourceExhausted(String),
}

impl StateError {
    pub(crate) fn not_found(what: &str, id: impl ToString) -> Self {
        Self::not_found_hint(what, id, "")
    }

    /// `hint` follows the message directly; start it with "; ".
    pub(crate) fn not_found_hint(what: &str, id: impl ToString, hint: &str) -> Self {
        StateError::NotFound { what: what.into(), id: id.to_string(), hint: hint.into() }
    }
}

/// Why a proposal or a leader read was not answered (`Core::propose`,
/// `Core::read_leader`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// The state machine refused the command; the state is unchanged.
    Rejected(StateError),
    /// This node is not the leader; try the leader (if one is known). Node ids are
    /// Raft's (`raft::NodeId`).
    NotLeader { node_id: u64, leader_id: Option<u64>, leader_address: Option<String> },
    /// Raft cannot serve now (shutting down, storage failure); try again or elsewhere.
    Unavailable(String),
}

impl From<StateError> for ProposeError {
    fn from(e: StateError) -> Self {
        ProposeError::Rejected(e)
    }
}

#[derive(Debug, Error)]
pub enum DispatcherError {
    #[error("invalid dispatcher configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Journal(#[from] sluice_journal::JournalError),
    /// The work_dir holds a record this build does not read (a newer build's).
    #[error(transparent)]
    Format(#[from] crate::raft::versioned::CheckError),
    #[error("raft: {0}")]
    Raft(String),
    /// The journal was purged past its snapshot (an earlier build installed a
    /// peer's snapshot that then failed, issue 31): openraft cannot start on it.
    #[error(
        "the journal at {journal} is purged up to log index {purged} but its snapshot \
         covers only up to {covered}: the entries between are lost and this node cannot \
         start on it. Restore the work_dir from a backup, or move it aside and start this \
         node with an empty work_dir so it rejoins the group and catches up from the leader"
    )]
    PurgedPastSnapshot { journal: String, purged: u64, covered: String },
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// TLS files, tokens, or a listener off loopback without them.
    #[error(transparent)]
    Security(#[from] sluice_security::SecurityError),
}

impl DispatcherError {
    pub(crate) fn raft(e: impl std::fmt::Display) -> Self {
        DispatcherError::Raft(e.to_string())
    }
}
