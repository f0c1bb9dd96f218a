//! Sluice's pipeline model: what a dataset is and how it runs.
//!
//! # Layout
//! - [`tensor`]: [`Tensor`] (dtype, shape, `Bytes` payload) and [`Element`] (a tuple
//!   of tensors) — the values that flow from the executor to the client uncopied.
//! - [`def`]: [`DatasetDef`], a list of [`Stage`]s with a builder API; plain data.
//! - `wire`: conversions to and from the protobuf types of `sluice-proto`.
//! - [`error`]: [`DatasetError`].
//!
//! Data flow: a client builds a `DatasetDef` (or reads its JSON form), the dispatcher
//! stores it, a worker executes it and streams `Element`s; the same executor runs it
//! locally, which tests use as the oracle.

pub mod def;
pub mod error;
pub mod tensor;
mod wire;

pub use def::{range_len, Arg, DatasetDef, FnCall, FnKind, SliceValues, Stage};
pub use error::DatasetError;
pub use tensor::{DType, Element, Tensor};
