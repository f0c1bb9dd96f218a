//! [`FileWriter`]: a file being written, returned by `io::create` for either backend.
//!
//! Why a module of its own: both backends (`io::local`, `io::object`) implement it and the
//! facade (`io`) returns it; as a leaf, the backends need not reach back into the facade.

use std::io::Write;

use crate::error::DatasetError;

/// A file being written; it appears under its name only once [`finish`] returns.
///
/// [`finish`]: FileWriter::finish
pub trait FileWriter: Write + Send {
    /// Flushes, makes the file durable and visible under its final name. Dropping
    /// the writer without calling it abandons the file.
    fn finish(self: Box<Self>) -> Result<(), DatasetError>;
}
