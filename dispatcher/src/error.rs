//! Errors of the dispatcher crate. `StateError` is what `apply` refuses with (state
//! unchanged); `DispatcherError` is what the server's setup can fail with. The
//! mapping to `tonic::Status` lives in `convert.rs`, in one place.

use thiserror::Error;

/// A command refused by the state machine. The state is unchanged.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StateError {
    #[error("{what} `{id}` not found{hint}")]
    NotFound { what: &'static str, id: String, hint: &'static str },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    FailedPrecondition(String),
}

impl StateError {
    pub(crate) fn not_found(what: &'static str, id: impl ToString) -> Self {
        StateError::NotFound { what, id: id.to_string(), hint: "" }
    }
}

#[derive(Debug, Error)]
pub enum DispatcherError {
    #[error("invalid dispatcher configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
