//! The client crate's error type. Variants carry the caller's decision: an
//! `Unavailable` peer was retried up to the deadline already; an `Rpc` error is the
//! server's verdict and will not change by retrying.

use std::time::Duration;

use sluice_dataset::DatasetError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ClientError {
    #[error(
        "{peer} at {address} was unavailable for {elapsed:?} ({attempts} attempts), giving up: \
         {last_error}. Check that it is running and that the address is right."
    )]
    Unavailable {
        /// "dispatcher" or "worker".
        peer: &'static str,
        address: String,
        attempts: u32,
        elapsed: Duration,
        last_error: String,
    },
    #[error("{peer} at {address} refused {call}: {code:?}: {message}")]
    Rpc {
        peer: &'static str,
        address: String,
        call: &'static str,
        code: tonic::Code,
        message: String,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// TLS files or a token that cannot be used (names the flag).
    #[error(transparent)]
    Security(#[from] sluice_security::SecurityError),
    #[error("protocol error from {address}: {message}")]
    Protocol { address: String, message: String },
    /// The read reached its end, but data was lost on the way: tasks it had not
    /// read to their end were ended because their worker was lost. Not retryable:
    /// the elements are gone (read again, in a new job, to get them).
    #[error(
        "the read lost data: {report}. Read the dataset again (a new job) to get every \
         element, or accept the loss (ReadOptions::accept_data_loss, `sluice read \
         --accept-data-loss`)"
    )]
    DataLost { report: crate::loss::LossReport },
}

impl ClientError {
    /// `peer` at `address` refused `call` with `status` (not retryable).
    pub(crate) fn rpc(
        peer: &'static str,
        address: &str,
        call: &'static str,
        status: &tonic::Status,
    ) -> Self {
        ClientError::Rpc {
            peer,
            address: address.to_string(),
            call,
            code: status.code(),
            message: status.message().to_string(),
        }
    }

    /// The gRPC code of a server-side refusal, if this is one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}
