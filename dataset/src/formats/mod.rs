//! File formats read by the file sources and written by the sample writer.
//!
//! - [`tfrecord`] — TFRecord framing (length, masked CRC-32C checksums) with
//!   bounded record sizes and an optional skip of corrupt records.
//! - [`example`] — `tf.train.Example` as messages generated from `proto/`, and the
//!   `parse_example` conversion into named tensors.

pub mod example;
pub mod tfrecord;
