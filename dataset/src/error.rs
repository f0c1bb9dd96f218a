//! The dataset crate's one error type.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum DatasetError {
    /// The definition is malformed; `field` is the path of the offending field
    /// (e.g. `stages[2].batch.size`).
    #[error("invalid dataset spec at `{field}`: {message}")]
    InvalidSpec { field: String, message: String },
    #[error("unknown {kind} function `{name}`; known {kind} functions: {known}")]
    UnknownFunction { kind: String, name: String, known: String },
    #[error("function `{name}`: {message}")]
    BadArguments { name: String, message: String },
    /// A function failed on an element at run time.
    #[error("function `{name}` failed: {message}")]
    Function { name: String, message: String },
    #[error("type mismatch: expected {expected}, found {found}")]
    TypeMismatch { expected: String, found: String },
    #[error("malformed tensor: {0}")]
    BadTensor(String),
    /// The split provider (the dispatcher, in DYNAMIC mode) failed.
    #[error("getting a split failed: {0}")]
    Split(String),
    #[error("{0}")]
    Unsupported(String),
}
