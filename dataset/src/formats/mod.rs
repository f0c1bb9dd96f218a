//! File formats read by the file sources and written by the sample writer.
//!
//! - [`tfrecord`] — TFRecord framing (length, masked CRC-32C checksums) with
//!   bounded record sizes and an optional skip of corrupt records.
//! - `direct` — the record readers' input: a read buffer for small pieces,
//!   direct reads into the record's own buffer for large ones.
//! - [`example`] — `tf.train.Example` as messages generated from `proto/`, and the
//!   `parse_example` conversion into named tensors.
//! - [`example_bounds`] — the feature and value counts of a serialized Example,
//!   checked against limits before it is decoded.
//! - [`webdataset`] — WebDataset shards: tar members grouped into samples by
//!   key, bounded, streamed through `tar_stream` (tar framing over the `tar`
//!   crate's header parsing).
//! - [`parquet`] — Parquet tables through arrow-rs: a row group is the split
//!   unit, only the named columns are read, rows become named tensors.
//! - [`FileFormat`] and the names of the built-in functions that read files
//!   (`file_function`), shared by the executor, the registry and the data-roots
//!   check of `io`.

pub mod example;
pub mod example_bounds;

/// How a file source or a built-in file function turns a file into elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    TfRecord { skip_corrupt: bool },
    TextLines,
    WebDataset,
}

/// The built-in dataset functions that open the file an element names, by name.
pub(crate) fn file_function(name: &str) -> Option<FileFormat> {
    match name {
        "tfrecord" => Some(FileFormat::TfRecord { skip_corrupt: false }),
        "tfrecord_skip_corrupt" => Some(FileFormat::TfRecord { skip_corrupt: true }),
        "text_lines" => Some(FileFormat::TextLines),
        "webdataset" => Some(FileFormat::WebDataset),
        _ => None,
    }
}
pub(crate) mod direct;
pub mod parquet;
pub(crate) mod tar_stream;
pub mod tfrecord;
pub mod webdataset;
