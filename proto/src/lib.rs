//! Wire types of Sluice: the generated prost messages and tonic services of
//! `proto/sluice.proto`.
//!
//! # Layout
//! - [`v1`]: every message and both services (`Dispatcher`, `Worker`), generated.
//! - [`compression`]: the element codec (zstd frames with a declared, bounded size).
//! - [`contract`]: the rest of the wire contract — reason codes and the leader's
//!   address carried on a status, and the element route's path and framing.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded schema; [`reflection`] serves it (and the
//!   health service's) as gRPC server reflection.
//! - [`MAX_MESSAGE_BYTES`]: the one bound on a gRPC message that every server and
//!   client in Sluice applies, so a bad peer cannot make another allocate without limit.
//!
//! - [`limits`]: the connection and request bounds every server and client
//!   applies (streams per connection, request timeout, keepalives).
//! - [`task_set`]: the digest of a worker's task ids, which both ends of
//!   `WorkerHeartbeat` compute.
//!
//! Domain types are not defined here: each crate converts wire types at its edge.

/// Generated code for package `sluice.v1`.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("sluice.v1");
}

/// The encoded `FileDescriptorSet` of `proto/sluice.proto`, for the gRPC
/// reflection service of dispatchers and workers (`grpcurl -plaintext HOST:PORT list`).
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("sluice_descriptor");

pub mod compression;
pub mod contract;
pub mod limits;
pub mod reflection;
pub mod task_set;

/// Largest encoded gRPC message any Sluice endpoint sends or accepts (64 MiB).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
