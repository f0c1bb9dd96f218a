//! The client crate's error type. Variants carry the caller's decision: an
//! `Unavailable` peer was retried up to the deadline already; an `Rpc` error is the
//! server's verdict and will not change by retrying.

use std::time::Duration;

use sluice_dataset::{DatasetError, UserFunctionFailure};
use sluice_proto::contract::Reason;
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
    /// A user's function in the pipeline (a Python stage) failed on a worker: the
    /// stage, the function, the worker, the exception and its traceback (the
    /// message is the failure's, traceback included). Not retryable: the read
    /// ended, as for any pipeline failure, and the same function would fail on
    /// the same element again.
    #[error("{0}")]
    UserFunction(Box<UserFunctionFailure>),
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

    /// The worker at `address` ended `call` with `status` (not retryable): a user
    /// function's failure when the status says so ([`Reason::UserFunction`] and
    /// the failure in its details; the worker's address filled in if the worker
    /// left it out), else a refusal.
    pub(crate) fn from_worker(address: &str, call: &'static str, status: &tonic::Status) -> Self {
        let failure = (Reason::of(status) == Some(Reason::UserFunction))
            .then(|| UserFunctionFailure::from_details(status.details()))
            .flatten();
        match failure {
            Some(mut failure) => {
                if failure.worker.is_empty() {
                    failure.worker = address.to_string();
                }
                ClientError::UserFunction(Box::new(failure))
            }
            None => ClientError::rpc("worker", address, call, status),
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

#[cfg(test)]
mod tests {
    use sluice_dataset::{Phase, PyFailure};
    use tonic::{Code, Status};

    use super::*;

    fn failure(worker: &str) -> UserFunctionFailure {
        UserFunctionFailure {
            stage: "stages[1]".into(),
            op: "map".into(),
            function: "aug:flip".into(),
            worker: worker.into(),
            phase: Phase::Call,
            failure: PyFailure {
                error_type: "ValueError".into(),
                message: "bad pixel".into(),
                traceback: "Traceback (most recent call last):\nValueError: bad pixel\n".into(),
            },
        }
    }

    fn status_of(f: &UserFunctionFailure) -> Status {
        let status =
            Status::with_details(Code::Internal, "task 7: pipeline failed", f.to_details().into());
        Reason::UserFunction.attach(status)
    }

    #[test]
    fn a_worker_status_with_a_user_function_failure_is_that_failure_naming_the_worker() {
        let e = ClientError::from_worker("10.0.0.5:5051", "GetElements", &status_of(&failure("")));
        let ClientError::UserFunction(f) = &e else { panic!("{e:?}") };
        assert_eq!(**f, failure("10.0.0.5:5051"), "the client names the worker it read");
        assert!(e.to_string().contains("failed on worker 10.0.0.5:5051: ValueError: bad pixel"));
        assert!(e.to_string().contains("Traceback (most recent call last)"), "{e}");
        // A worker that named itself keeps its own name (e.g. behind a proxy).
        let e = ClientError::from_worker("proxy:1", "GetElements", &status_of(&failure("w:9")));
        assert!(matches!(&e, ClientError::UserFunction(f) if f.worker == "w:9"), "{e:?}");
    }

    #[test]
    fn other_worker_statuses_stay_refusals() {
        let plain = Status::internal("task 7: pipeline failed: boom");
        let e = ClientError::from_worker("w:1", "GetElements", &plain);
        assert!(matches!(e, ClientError::Rpc { code: Code::Internal, .. }), "{e:?}");
        // The reason without readable details: the message is all there is.
        let torn = Reason::UserFunction.attach(Status::internal("task 7: pipeline failed: x"));
        let e = ClientError::from_worker("w:1", "GetElements", &torn);
        assert!(matches!(e, ClientError::Rpc { .. }), "{e:?}");
    }
}
