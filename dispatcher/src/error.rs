//! Errors of the dispatcher crate. `StateError` is what `apply` refuses with (state
//! unchanged); `DispatcherError` is what the server's setup can fail with. The
//! mapping to `tonic::Status` lives in `convert.rs`, in one place.

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

#[derive(Debug, Error)]
pub enum DispatcherError {
    #[error("invalid dispatcher configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Journal(#[from] sluice_journal::JournalError),
    #[error("raft: {0}")]
    Raft(String),
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl DispatcherError {
    pub(crate) fn raft(e: impl std::fmt::Display) -> Self {
        DispatcherError::Raft(e.to_string())
    }
}
