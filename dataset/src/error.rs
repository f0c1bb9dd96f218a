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
    /// Reading, writing or listing a file or object failed (`file` is its URL or path).
    #[error("I/O error on `{file}`: {message}")]
    Io { file: String, message: String },
    /// A file or object that does not exist (`file` is its URL or path): the
    /// reader's status code is `NotFound` (Python `NotFoundError`), as tf.data's.
    #[error("`{file}` does not exist ({message}): check the name, and that every worker sees it")]
    NotFound { file: String, message: String },
    /// A file or object lies outside the data roots (`io::DataRoots`): refused
    /// before anything is opened; `message` names the roots and the flag.
    #[error("`{file}` may not be read: {message}")]
    Forbidden { file: String, message: String },
    /// A file's content is malformed at byte `offset` (e.g. a TFRecord checksum
    /// mismatch); `format` names the file format.
    #[error("corrupt {format} in `{file}` at byte {offset}: {message}")]
    Corrupt { format: &'static str, file: String, offset: u64, message: String },
    /// One record of a file is malformed but the file's framing is intact (a
    /// WebDataset sample over a bound, or whose members are not consecutive):
    /// an element error, so the read may go on past it and `ignore_errors` may
    /// skip it. `offset` is the record's byte offset; `format` names the format.
    #[error("bad {format} record in `{file}` at byte {offset}: {message}")]
    BadRecord { format: &'static str, file: String, offset: u64, message: String },
    /// One row of a table cannot become an element (a null without a default, a
    /// value no tensor holds), naming the row group and the row within it: an
    /// element error, like [`DatasetError::BadRecord`].
    #[error("bad {format} row in `{file}` (row group {group}, row {row}): {message}")]
    BadRow { format: &'static str, file: String, group: u64, row: u64, message: String },
    /// A decoding map (`decode_jpeg`, `decode_png`) cannot read its element's
    /// bytes (a damaged or lying image): an element error, like
    /// [`DatasetError::BadRecord`], so `ignore_errors` may skip it.
    #[error("function `{name}` cannot decode this element: {message}")]
    BadInput { name: String, message: String },
    /// A `tf.train.Example` does not match the `parse_example` feature specs.
    #[error("parse_example: {0}")]
    BadExample(String),
    /// The pipeline's thread panicked outside a registry function (which yields a
    /// `Function` error instead): a bug, reported rather than taken for the end.
    #[error("the pipeline panicked: {0}")]
    Panicked(String),
    /// The user's Python function failed on an element (or could not be loaded).
    /// The only error a stage may yield and then go on: `ignore_errors` skips it.
    #[error("{0}")]
    UserFunction(Box<crate::python::UserFunctionFailure>),
}

impl DatasetError {
    /// Whether the error concerns one element only, so that the pipeline may go on
    /// past it (a user function's failure, a bad record of an intact file); every
    /// other error ends the pipeline.
    pub fn is_element_error(&self) -> bool {
        match self {
            DatasetError::UserFunction(f) => f.phase == crate::python::Phase::Call,
            DatasetError::BadRecord { .. }
            | DatasetError::BadRow { .. }
            | DatasetError::BadInput { .. } => true,
            _ => false,
        }
    }

    /// An [`DatasetError::Io`] for `file`.
    pub fn io(file: impl Into<String>, message: impl std::fmt::Display) -> Self {
        DatasetError::Io { file: file.into(), message: message.to_string() }
    }

    /// `e`, met opening `file`: [`DatasetError::NotFound`] when the file does not
    /// exist, else [`DatasetError::Io`].
    pub fn opening(file: impl Into<String>, e: &std::io::Error) -> Self {
        let (file, message) = (file.into(), e.to_string());
        if e.kind() == std::io::ErrorKind::NotFound {
            DatasetError::NotFound { file, message }
        } else {
            DatasetError::Io { file, message }
        }
    }

    /// `e`, met reading `file`: an object that turned out not to exist (the object
    /// reader passes its [`DatasetError::NotFound`] through `std::io::Error`) stays
    /// [`DatasetError::NotFound`]; anything else is [`DatasetError::Io`].
    pub fn reading(file: impl Into<String>, e: &std::io::Error) -> Self {
        match e.get_ref().and_then(|inner| inner.downcast_ref::<DatasetError>()) {
            Some(DatasetError::NotFound { file, message }) => {
                DatasetError::NotFound { file: file.clone(), message: message.clone() }
            }
            _ => DatasetError::io(file, e),
        }
    }
}
