//! File formats read by the file sources and written by the sample writer.
//!
//! - [`tfrecord`] — TFRecord framing (length, masked CRC-32C checksums) with
//!   bounded record sizes and an optional skip of corrupt records.
//! - [`example`] — `tf.train.Example` as messages generated from `proto/`, and the
//!   `parse_example` conversion into named tensors.
//! - [`example_bounds`] — the feature and value counts of a serialized Example,
//!   checked against limits before it is decoded.

pub mod example;
pub mod example_bounds;
pub mod tfrecord;
