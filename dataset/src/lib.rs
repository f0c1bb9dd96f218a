//! Sluice's pipeline model: what a dataset is and how it runs.
//!
//! # Layout
//! - [`tensor`] — [`Tensor`] (dtype, shape, `Bytes` payload) and [`Element`] (a tuple
//!   of tensors) — the values that flow from the executor to the client uncopied.
//! - [`def`] — [`DatasetDef`], a list of [`Stage`]s with a builder API; plain data.
//! - `wire`: conversions to and from the protobuf types of `sluice-proto`.
//! - `json`: the JSON form (`DatasetDef::from_json` / `to_json`) with errors that
//!   name the offending field; documented in `docs/dataset-spec.md`.
//! - [`registry`] — [`FunctionRegistry`], the named map/filter functions a pipeline
//!   may call (built-ins live in `builtins`; custom workers add their own).
//! - [`exec`] — the pull-based executor (`DatasetDef::iter_local`,
//!   `iter_with_splits`) and the [`SplitProvider`] a DYNAMIC-mode source reads.
//! - [`error`] — [`DatasetError`], the crate's one error type.
//!
//! Data flow: a client builds a `DatasetDef` (or reads its JSON form), the dispatcher
//! stores it, a worker executes it and streams `Element`s; the same executor runs it
//! locally, which tests use as the oracle.

mod builtins;
pub mod def;
pub mod error;
pub mod exec;
pub mod formats;
pub mod io;
mod json;
pub mod registry;
pub mod sharding;
pub mod tensor;
mod wire;

pub use def::{
    range_len, Arg, DatasetDef, FeatureSpec, FnCall, FnKind, ShardArg, SliceValues, Stage,
    SHARD_HINT,
};
pub use error::DatasetError;
pub use exec::{ElementIter, SplitProvider, SplitRange};
pub use registry::{DatasetFn, FilterFn, FunctionRegistry, MapFn};
pub use sharding::StaticPolicy;
pub use tensor::{DType, Element, Tensor};
