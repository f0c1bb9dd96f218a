//! A failed pipeline's error as the status that ends a read ([`status_of`]).
//!
//! The code says the kind of failure, as tf.data's does, so a reader can tell
//! bad data from a bug: a corrupt file is `DataLoss`, a file that does not exist
//! `NotFound`, a file outside the data roots `PermissionDenied`, anything else
//! `Internal` (Python: `DataLossError`, `NotFoundError`, `PermissionDeniedError`,
//! `InternalError`). The client keys nothing on these codes (its decisions ride
//! on [`Reason`]s), so they only name the failure.
//!
//! A user function's failure: code `Internal` (the
//! pipeline failed, as for any pipeline error), [`Reason::UserFunction`], the
//! [`UserFunctionFailure`] as JSON in the status's details (what the client turns
//! into `ClientError::UserFunction`, and Python into `sluice.UserFunctionError`),
//! and the failure's text in the message for any other gRPC reader.
//!
//! Why bounded: a status travels in HTTP/2 trailers, and a reader's HTTP/2
//! client takes at most 16 KiB of header list (hyper's default); a status over
//! that would reach the reader as a torn stream instead of the user's error. The
//! message and the details both carry the failure, so its parts are cut to fit
//! twice: the traceback keeps its end (the innermost frames and the exception
//! line, what a user reads first), the exception message its start.

use sluice_dataset::{DatasetError, UserFunctionFailure};
use sluice_proto::contract::Reason;
use tonic::{Code, Status};

/// Bytes of the traceback kept (its end).
pub(crate) const MAX_TRACEBACK_BYTES: usize = 4 * 1024;
/// Bytes of the exception's message kept (its start).
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;
/// Bytes kept of each name (stage, function, worker, exception type).
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// The status of a read of task `task_id` that `error` ended, on the worker at
/// `worker`.
pub(crate) fn status_of(task_id: u64, error: &DatasetError, worker: &str) -> Status {
    let code = match error {
        DatasetError::UserFunction(failure) => return status(task_id, failure, worker),
        DatasetError::Corrupt { .. }
        | DatasetError::BadRecord { .. }
        | DatasetError::BadRow { .. }
        | DatasetError::BadInput { .. } => Code::DataLoss,
        DatasetError::NotFound { .. } => Code::NotFound,
        DatasetError::Forbidden { .. } => Code::PermissionDenied,
        _ => Code::Internal,
    };
    Status::new(code, pipeline_failed(task_id, error))
}

/// The message of a read that `what` ended.
pub(crate) fn pipeline_failed(task_id: u64, what: impl std::fmt::Display) -> String {
    format!("task {task_id}: pipeline failed: {what}")
}

/// The status of a read that `failure` ended, on the worker at `worker`.
pub(crate) fn status(task_id: u64, failure: &UserFunctionFailure, worker: &str) -> Status {
    let mut failure = failure.clone();
    if failure.worker.is_empty() {
        failure.worker = worker.to_string();
    }
    let failure = bounded(failure);
    let message = pipeline_failed(task_id, &failure);
    let status = Status::with_details(Code::Internal, message, failure.to_details().into());
    Reason::UserFunction.attach(status)
}

/// `failure` with each part within its bound.
pub(crate) fn bounded(mut f: UserFunctionFailure) -> UserFunctionFailure {
    for name in [&mut f.stage, &mut f.op, &mut f.function, &mut f.worker, &mut f.failure.error_type]
    {
        keep_start(name, MAX_NAME_BYTES);
    }
    keep_start(&mut f.failure.message, MAX_MESSAGE_BYTES);
    keep_end(&mut f.failure.traceback, MAX_TRACEBACK_BYTES);
    f
}

/// Keeps the first `max` bytes of `s` (at a character boundary), saying so.
fn keep_start(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = s.len() - end;
    s.truncate(end);
    s.push_str(&format!(" … ({cut} more bytes)"));
}

/// Keeps the last `max` bytes of `s` (from a line start when there is one),
/// saying how much was cut.
fn keep_end(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    if let Some(newline) = s[start..].find('\n').filter(|n| start + n + 1 < s.len()) {
        start += newline + 1;
    }
    *s = format!("… ({start} bytes of traceback cut)\n{}", &s[start..]);
}
