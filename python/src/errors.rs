//! Rust errors as the Python exceptions of `sluice.errors`.
//!
//! The exception classes are defined in Python (`sluice/errors.py`), so they can
//! also derive from the built-in class a Python user expects (`ValueError` for an
//! invalid argument, `TimeoutError` for a deadline, ...). This module only picks
//! the class, by the kind of failure, and keeps the Rust message intact. A user
//! function's failure becomes `UserFunctionError` with its parts as attributes.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use sluice_client::ClientError;
use sluice_dataset::{DatasetError, Phase, UserFunctionFailure};

/// The classes of `sluice.errors`, by name.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Cancelled => "CancelledError",
            Kind::Unknown => "UnknownError",
            Kind::InvalidArgument => "InvalidArgumentError",
            Kind::DeadlineExceeded => "DeadlineExceededError",
            Kind::NotFound => "NotFoundError",
            Kind::AlreadyExists => "AlreadyExistsError",
            Kind::PermissionDenied => "PermissionDeniedError",
            Kind::ResourceExhausted => "ResourceExhaustedError",
            Kind::FailedPrecondition => "FailedPreconditionError",
            Kind::Aborted => "AbortedError",
            Kind::OutOfRange => "OutOfRangeError",
            Kind::Unimplemented => "UnimplementedError",
            Kind::Internal => "InternalError",
            Kind::Unavailable => "UnavailableError",
            Kind::DataLoss => "DataLossError",
            Kind::Unauthenticated => "UnauthenticatedError",
        }
    }

    /// The class for a gRPC status code.
    pub fn of_code(code: tonic::Code) -> Kind {
        use tonic::Code as C;
        match code {
            C::Ok | C::Unknown => Kind::Unknown,
            C::Cancelled => Kind::Cancelled,
            C::InvalidArgument => Kind::InvalidArgument,
            C::DeadlineExceeded => Kind::DeadlineExceeded,
            C::NotFound => Kind::NotFound,
            C::AlreadyExists => Kind::AlreadyExists,
            C::PermissionDenied => Kind::PermissionDenied,
            C::ResourceExhausted => Kind::ResourceExhausted,
            C::FailedPrecondition => Kind::FailedPrecondition,
            C::Aborted => Kind::Aborted,
            C::OutOfRange => Kind::OutOfRange,
            C::Unimplemented => Kind::Unimplemented,
            C::Internal => Kind::Internal,
            C::Unavailable => Kind::Unavailable,
            C::DataLoss => Kind::DataLoss,
            C::Unauthenticated => Kind::Unauthenticated,
        }
    }
}

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The class `name` of `sluice.errors`.
fn errors_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    ERRORS_MODULE
        .get_or_try_init(py, || py.import("sluice.errors").map(Bound::unbind))
        .and_then(|m| m.bind(py).getattr(name))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from))
}

/// A `sluice.errors` exception of `kind` carrying `message`.
pub fn new_err(kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let class = errors_class(py, kind.class_name());
        match class {
            Ok(class) => PyErr::from_type(class, message),
            // The package is broken (errors.py missing): still say what failed.
            Err(e) => pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{message} (and sluice.errors could not be loaded: {e})"
            )),
        }
    })
}

pub fn invalid_argument(message: impl Into<String>) -> PyErr {
    new_err(Kind::InvalidArgument, message)
}
pub fn failed_precondition(message: impl Into<String>) -> PyErr {
    new_err(Kind::FailedPrecondition, message)
}
pub fn internal(message: impl Into<String>) -> PyErr {
    new_err(Kind::Internal, message)
}
pub fn deadline_exceeded(message: impl Into<String>) -> PyErr {
    new_err(Kind::DeadlineExceeded, message)
}

/// `sluice.UserFunctionError`: the failure's text (traceback included) as its
/// message, its parts as attributes.
pub fn user_function(f: &UserFunctionFailure) -> PyErr {
    let message = f.to_string();
    Python::attach(|py| {
        let made = || -> PyResult<PyErr> {
            let kwargs = PyDict::new(py);
            kwargs.set_item("traceback", &f.failure.traceback)?;
            kwargs.set_item("stage", &f.stage)?;
            kwargs.set_item("op", &f.op)?;
            kwargs.set_item("function", &f.function)?;
            kwargs.set_item("worker", &f.worker)?;
            kwargs.set_item("error_type", &f.failure.error_type)?;
            let phase = match f.phase {
                Phase::Load => "load",
                Phase::Call => "call",
            };
            kwargs.set_item("phase", phase)?;
            let e = errors_class(py, "UserFunctionError")?.call((&message,), Some(&kwargs))?;
            Ok(PyErr::from_value(e))
        };
        made().unwrap_or_else(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{message} (and sluice.errors.UserFunctionError could not be made: {e})"
            ))
        })
    })
}

/// The client's error as the exception of its kind, with its full message.
pub fn from_client(e: ClientError) -> PyErr {
    let kind = match &e {
        // A worker's failure of a user function, or one in a pipeline run here.
        ClientError::UserFunction(f) => return user_function(f),
        ClientError::Dataset(DatasetError::UserFunction(f)) => return user_function(f),
        // A pipeline run in this process: the kinds a worker's status would carry.
        ClientError::Dataset(
            DatasetError::Corrupt { .. }
            | DatasetError::BadRecord { .. }
            | DatasetError::BadRow { .. }
            | DatasetError::BadInput { .. },
        ) => Kind::DataLoss,
        ClientError::Dataset(DatasetError::NotFound { .. }) => Kind::NotFound,
        ClientError::Dataset(DatasetError::Forbidden { .. }) => Kind::PermissionDenied,
        ClientError::Unavailable { .. } => Kind::Unavailable,
        ClientError::Rpc { code, .. } => Kind::of_code(*code),
        ClientError::InvalidArgument(_) | ClientError::Dataset(_) | ClientError::Security(_) => {
            Kind::InvalidArgument
        }
        ClientError::Protocol { .. } => Kind::Internal,
        ClientError::DataLost { .. } => Kind::DataLoss,
    };
    new_err(kind, e.to_string())
}
