//! Sluice's pipeline model: what a dataset is and how it runs.
//!
//! # Layout
//! - [`tensor`] — [`Tensor`] (dtype, shape, `Bytes` payload) and [`Element`] (a tuple
//!   of tensors) — the values that flow from the executor to the client uncopied.
//! - [`def`] — [`DatasetDef`], a list of [`Stage`]s with a builder API; plain data.
//! - `slices` — the values of `from_tensor_slices` ([`SliceValues`]): the simple
//!   lists and the general `tensors` form, their JSON (base64 payloads) and checks.
//! - `replay` — `DatasetDef::exactly_once`: whether a pipeline is replayable (an
//!   exactly-once job's condition, docs/exactly-once.md) and its units' records.
//! - [`cardinality`] — [`Cardinality`]: finite, infinite or unknown, from the stages.
//! - `wire`: conversions to and from the protobuf types of `sluice-proto`.
//! - `json`: the JSON form (`DatasetDef::from_json` / `to_json`) with errors that
//!   name the offending field; documented in `docs/dataset-spec.md`.
//! - [`registry`] — [`FunctionRegistry`], the named map/filter functions a pipeline
//!   may call (built-ins live in `builtins`, which also defines
//!   [`FunctionRegistry::builtin`]; custom workers add their own).
//! - [`exec`] — the pull-based executor (`DatasetDef::iter_local`,
//!   `iter_with_splits`) and the [`SplitProvider`] a DYNAMIC-mode source reads:
//!   `exec::stream` holds the types every stage shares, `exec::plan` builds the chain
//!   of stages, one module per stage.
//! - [`io`] — file access by path or URL (`file://`, `s3://`, `gs://`): `list_files`,
//!   streaming `open`, crash-safe `create`, and `DatasetDef::resolve_files`
//!   (`io::url` parses the forms, `io::writer` is the writer both backends return,
//!   `io::local` and `io::object` the backends).
//! - [`formats`] — TFRecord framing, `tf.train.Example` parsing, and WebDataset
//!   shards (tar members grouped into samples).
//! - `image` — the built-in image maps (`decode_png`, `decode_jpeg`, `center_crop`,
//!   `resize`, `random_resized_crop`, `random_flip`, `normalize`); the seeded ones
//!   draw from a stream keyed by the element's origin (`registry::ElementKey`).
//! - [`sample`] — sample image dataset writers (TFRecord, WebDataset) and the
//!   pipelines that read them.
//! - [`python`] — Python stages: the spec's [`PythonStage`], what a pipeline needs
//!   of a worker ([`PythonNeeds`]), and the [`PythonExecutor`] trait a worker's
//!   process pool implements (`exec::python` is the stage that calls it).
//! - [`error`] — [`DatasetError`], the crate's one error type.
//! - [`bounds`] — the limits of the spec parameters that size memory (batch,
//!   shuffle, `parse_example` shapes), checked by `DatasetDef::validate`.
//! - `fuzzing` (feature `fuzzing`) — entry points for the fuzz targets in `fuzz/` and
//!   the corpus-replay test (`tests/fuzz_corpus.rs`); not an API.
//!
//! File sources (`list_files`, `tfrecord`, `text_lines`, `webdataset`) read through
//! [`io`]; their split unit is a file, opened lazily by the executor's source stage
//! (`exec`).
//!
//! Data flow: a client builds a `DatasetDef` (or reads its JSON form), the dispatcher
//! stores it, a worker executes it and streams `Element`s; the same executor runs it
//! locally, which tests use as the oracle.

pub mod bounds;
mod builtins;
pub mod cardinality;
pub mod def;
pub mod error;
pub mod exec;
pub mod formats;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod image;
pub mod io;
mod json;
pub mod python;
pub mod registry;
mod replay;
pub mod sample;
pub mod sharding;
mod slices;
pub mod tensor;
mod wire;

pub use cardinality::Cardinality;
pub use def::{
    range_len, Arg, DatasetDef, FeatureSpec, FnCall, FnKind, ShardArg, SliceValues, Stage,
    MAX_NESTING, MAX_STAGES, SHARD_HINT,
};
pub use error::DatasetError;
pub use exec::{DroppedSink, ElementIter, SplitProvider, SplitRange, TaggedIter};
pub use python::{
    Phase, Pickled, PyCall, PyFailure, PyFunction, PyOp, PyOutcome, PyReply, PyResponse,
    PythonExecutor, PythonNeeds, PythonStage, SharedPythonExecutor, UserFunctionFailure,
};
pub use registry::{DatasetFn, FilterFn, FunctionRegistry, MapFn};
pub use sharding::StaticPolicy;
pub use tensor::{DType, Element, Tensor, ITEM_PREFIX};
