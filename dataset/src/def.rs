//! The dataset definition: a pipeline of stages, its builder API and its checks.
//!
//! A [`DatasetDef`] is a list of [`Stage`]s: the first is a *source* (`range`,
//! `from_tensor_slices`, the file sources), each later one transforms the stream
//! before it. It is plain data — serialisable to protobuf (see `wire`), to JSON (see
//! `json` and `docs/dataset-spec.md`) and to bincode (the dispatcher's log) — and
//! executed by `exec` on workers and locally.

use serde::{Deserialize, Serialize};

use crate::error::DatasetError;
use crate::tensor::Tensor;

/// A function argument: JSON numbers without a fraction are ints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arg {
    Int(i64),
    Float(f64),
    Str(String),
}

/// A call of a registry function by name, with constant arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FnCall {
    #[serde(rename = "fn")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Arg>,
}

impl FnCall {
    pub fn new(name: impl Into<String>, args: Vec<Arg>) -> Self {
        FnCall { name: name.into(), args }
    }
}

pub use crate::slices::SliceValues;

fn zero() -> i64 {
    0
}
fn one() -> i64 {
    1
}
fn one_u32() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn is_one(n: &u32) -> bool {
    *n == 1
}
fn is_true(b: &bool) -> bool {
    *b
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// `shard`'s `num_shards` / `index`: a number, or the `SHARD_HINT` placeholder that
/// HINT sharding replaces with (number of workers, worker index). JSON: an integer
/// or the string `"SHARD_HINT"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardArg {
    Value(u64),
    Hint,
}

impl Serialize for ShardArg {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ShardArg::Value(v) => s.serialize_u64(*v),
            ShardArg::Hint => s.serialize_str(SHARD_HINT),
        }
    }
}

impl<'de> Deserialize<'de> for ShardArg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(v) => Ok(ShardArg::Value(v)),
            Raw::S(s) if s == SHARD_HINT => Ok(ShardArg::Hint),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "expected a non-negative integer or \"{SHARD_HINT}\", got \"{s}\""
            ))),
        }
    }
}

/// The placeholder of [`ShardArg::Hint`].
pub const SHARD_HINT: &str = "SHARD_HINT";

/// How `parse_example` reads one feature of a `tf.train.Example`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpec {
    /// The feature's key in the Example, and the component's name.
    pub name: String,
    /// `int64`, `float32` or `bytes`/`string` (the three tf.train.Feature lists).
    pub dtype: crate::tensor::DType,
    /// Fixed shape (`[]` for a scalar); the feature must hold exactly its number of
    /// values. `None`: a 1-D tensor of however many values the feature has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Used when the feature is absent (a fixed-shape feature without a default is
    /// then an error naming it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Arg>,
}

/// One stage of a pipeline. Unknown fields inside a stage are rejected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Stage {
    /// Source: `start, start+step, …` up to but excluding `stop`, as int64 scalars.
    Range {
        #[serde(default = "zero")]
        start: i64,
        stop: i64,
        #[serde(default = "one")]
        step: i64,
    },
    /// Source: one scalar element per value of a list, or, in the `tensors` form,
    /// element `i` = row `i` of every tensor (see [`SliceValues`]).
    FromTensorSlices(SliceValues),
    /// Source: the names of the files matching `pattern` (a path, `file://`,
    /// `s3://` or `gs://` URL whose last components may hold `*`, `?`, `[…]`), as
    /// string scalars, sorted (then shuffled by `seed` when `shuffle`). The
    /// dispatcher resolves the pattern once, at registration, into `files`: the
    /// split order is then part of the replicated state.
    ListFiles {
        pattern: String,
        #[serde(default, skip_serializing_if = "is_false")]
        shuffle: bool,
        #[serde(default)]
        seed: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        files: Option<Vec<String>>,
    },
    /// Source: the records of TFRecord files, in file order, as bytes scalars.
    /// A corrupt record is an error naming file and offset, or skipped (and
    /// counted) with `skip_corrupt`. JSON `tfrecord`, as documented and as
    /// `op_name` and the errors say; `tf_record`, what snake_case made of the
    /// variant before, is still read.
    #[serde(rename = "tfrecord", alias = "tf_record")]
    TfRecord {
        files: Vec<String>,
        #[serde(default, skip_serializing_if = "is_false")]
        skip_corrupt: bool,
    },
    /// Source: the lines of text files (without line endings), as string scalars.
    TextLines {
        files: Vec<String>,
    },
    /// Source: the samples of WebDataset shards (tar files whose consecutive
    /// members with one key make a sample), in shard order: one element per
    /// sample, with a `__key__` string scalar and one bytes scalar per extension
    /// (`formats::webdataset`). The split unit is a shard.
    #[serde(rename = "webdataset")]
    WebDataset {
        files: Vec<String>,
    },
    /// Source: the rows of Parquet files (`formats::parquet`). The split unit is
    /// a row group.
    Parquet(crate::formats::parquet::ParquetSource),
    /// Applies a map function; with `num_parallel_calls` > 1 (0 = one per core) on
    /// that many threads, in input order unless `deterministic` is false.
    Map {
        #[serde(rename = "fn")]
        name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<Arg>,
        #[serde(default = "one_u32", skip_serializing_if = "is_one")]
        num_parallel_calls: u32,
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        deterministic: bool,
    },
    Filter(FnCall),
    Batch {
        size: u64,
        #[serde(default)]
        drop_remainder: bool,
    },
    Shuffle {
        buffer_size: u64,
        #[serde(default)]
        seed: u64,
    },
    /// `count: None` repeats forever.
    Repeat {
        #[serde(default)]
        count: Option<u64>,
    },
    Take {
        count: u64,
    },
    Skip {
        count: u64,
    },
    Prefetch {
        buffer_size: u64,
    },
    /// Replaces each element by the elements of the dataset a dataset function
    /// (e.g. `tfrecord`, `text_lines`) makes of it, one input at a time.
    FlatMap(FnCall),
    /// Like `flat_map`, but `cycle_length` inputs open at once, taking
    /// `block_length` elements from each in turn; with `num_parallel_calls` > 1
    /// (0 = one per core) the open inputs are read ahead on that many threads. The
    /// output order is deterministic either way.
    Interleave {
        #[serde(rename = "fn")]
        name: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<Arg>,
        cycle_length: u32,
        #[serde(default = "one_u32")]
        block_length: u32,
        #[serde(default = "one_u32", skip_serializing_if = "is_one")]
        num_parallel_calls: u32,
    },
    /// Pairs each element with the next element of each of `datasets` (whole
    /// pipelines with their own sources); ends with the shortest.
    Zip {
        datasets: Vec<DatasetDef>,
    },
    /// Continues with the elements of `dataset` after this stream ends.
    Concatenate {
        dataset: Box<DatasetDef>,
    },
    /// Prepends an int64 counter (from `start`) to each element's components.
    Enumerate {
        #[serde(default)]
        start: i64,
    },
    /// Keeps elements whose index mod `num_shards` is `index`.
    Shard {
        num_shards: ShardArg,
        index: ShardArg,
    },
    /// Parses serialized `tf.train.Example` records (one bytes scalar per element)
    /// into one named component per feature.
    ParseExample {
        features: Vec<FeatureSpec>,
    },
    /// Runs the user's Python function (`map`, `filter`, `flat_map`,
    /// `map_batches`) on the worker's pool of Python processes (see `python`).
    Python(crate::python::PythonStage),
    /// Skips the elements whose computation failed in a user function upstream
    /// (tf.data's `ignore_errors`), counting them; other errors still end the read.
    IgnoreErrors {},
}

impl Stage {
    /// The JSON / builder name of this stage's op.
    pub fn op_name(&self) -> &'static str {
        match self {
            Stage::Range { .. } => "range",
            Stage::FromTensorSlices(_) => "from_tensor_slices",
            Stage::ListFiles { .. } => "list_files",
            Stage::TfRecord { .. } => "tfrecord",
            Stage::TextLines { .. } => "text_lines",
            Stage::WebDataset { .. } => "webdataset",
            Stage::Parquet(_) => "parquet",
            Stage::Map { .. } => "map",
            Stage::Filter(_) => "filter",
            Stage::Batch { .. } => "batch",
            Stage::Shuffle { .. } => "shuffle",
            Stage::Repeat { .. } => "repeat",
            Stage::Take { .. } => "take",
            Stage::Skip { .. } => "skip",
            Stage::Prefetch { .. } => "prefetch",
            Stage::FlatMap(_) => "flat_map",
            Stage::Interleave { .. } => "interleave",
            Stage::Zip { .. } => "zip",
            Stage::Concatenate { .. } => "concatenate",
            Stage::Enumerate { .. } => "enumerate",
            Stage::Shard { .. } => "shard",
            Stage::ParseExample { .. } => "parse_example",
            Stage::Python(_) => "python",
            Stage::IgnoreErrors {} => "ignore_errors",
        }
    }
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Stage::Range { .. }
                | Stage::FromTensorSlices(_)
                | Stage::ListFiles { .. }
                | Stage::TfRecord { .. }
                | Stage::TextLines { .. }
                | Stage::WebDataset { .. }
                | Stage::Parquet(_)
        )
    }
    /// Whether this source reads files: its split unit is a file, and FILE sharding
    /// can divide it.
    pub fn is_file_source(&self) -> bool {
        matches!(
            self,
            Stage::ListFiles { .. }
                | Stage::TfRecord { .. }
                | Stage::TextLines { .. }
                | Stage::WebDataset { .. }
                | Stage::Parquet(_)
        )
    }
}

/// Whether a registry function maps elements or filters them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FnKind {
    Map,
    Filter,
    /// Makes a dataset of an element: what `flat_map` and `interleave` call.
    Dataset,
}

impl FnKind {
    pub fn name(self) -> &'static str {
        match self {
            FnKind::Map => "map",
            FnKind::Filter => "filter",
            FnKind::Dataset => "dataset",
        }
    }
}

/// A serialisable pipeline definition. Build it with the methods below:
/// `DatasetDef::range(10).map("square").batch(4, false)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetDef {
    pub stages: Vec<Stage>,
}

impl DatasetDef {
    /// `range(0, stop, 1)`.
    pub fn range(stop: i64) -> Self {
        Self::range_with(0, stop, 1)
    }
    pub fn range_with(start: i64, stop: i64, step: i64) -> Self {
        DatasetDef { stages: vec![Stage::Range { start, stop, step }] }
    }
    pub fn from_tensor_slices(values: SliceValues) -> Self {
        DatasetDef { stages: vec![Stage::FromTensorSlices(values)] }
    }
    pub fn from_ints(values: Vec<i64>) -> Self {
        Self::from_tensor_slices(SliceValues::Ints(values))
    }
    pub fn from_floats(values: Vec<f32>) -> Self {
        Self::from_tensor_slices(SliceValues::Floats(values))
    }
    pub fn from_strings<S: Into<String>>(values: Vec<S>) -> Self {
        Self::from_tensor_slices(SliceValues::Strings(values.into_iter().map(Into::into).collect()))
    }
    pub fn from_bytes(values: Vec<Vec<u8>>) -> Self {
        Self::from_tensor_slices(SliceValues::Bytes(values))
    }
    /// Source: element `i` is the tuple of every tensor's row `i` (tf.data's
    /// `from_tensor_slices((a, b))`); the tensors must share their first dimension.
    pub fn from_tensors(tensors: Vec<Tensor>) -> Self {
        Self::from_tensor_slices(SliceValues::Tensors { tensors, names: None })
    }
    /// Like [`Self::from_tensors`], with named components (tf.data's
    /// `from_tensor_slices({"x": a, "y": b})`).
    pub fn from_named_tensors<S: Into<String>>(named: Vec<(S, Tensor)>) -> Self {
        let (names, tensors) = named.into_iter().map(|(n, t)| (n.into(), t)).unzip();
        Self::from_tensor_slices(SliceValues::Tensors { tensors, names: Some(names) })
    }

    fn then(mut self, stage: Stage) -> Self {
        self.stages.push(stage);
        self
    }
    /// Map with a registry function that takes no arguments.
    pub fn map(self, name: &str) -> Self {
        self.map_with(name, vec![])
    }
    pub fn map_with(self, name: &str, args: Vec<Arg>) -> Self {
        self.parallel_map(name, args, 1)
    }
    /// Map on `num_parallel_calls` threads (0 = one per core), in order.
    pub fn parallel_map(self, name: &str, args: Vec<Arg>, num_parallel_calls: u32) -> Self {
        self.then(Stage::Map {
            name: name.to_string(),
            args,
            num_parallel_calls,
            deterministic: true,
        })
    }
    /// Source: files matching `pattern`, sorted.
    pub fn list_files(pattern: &str) -> Self {
        DatasetDef {
            stages: vec![Stage::ListFiles {
                pattern: pattern.to_string(),
                shuffle: false,
                seed: 0,
                files: None,
            }],
        }
    }
    /// Source: the records of TFRecord files.
    pub fn tfrecord<S: Into<String>>(files: Vec<S>) -> Self {
        let files = files.into_iter().map(Into::into).collect();
        DatasetDef { stages: vec![Stage::TfRecord { files, skip_corrupt: false }] }
    }
    /// Source: the lines of text files.
    pub fn text_lines<S: Into<String>>(files: Vec<S>) -> Self {
        let files = files.into_iter().map(Into::into).collect();
        DatasetDef { stages: vec![Stage::TextLines { files }] }
    }
    /// Source: the samples of WebDataset shards (tar files).
    pub fn webdataset<S: Into<String>>(files: Vec<S>) -> Self {
        let files = files.into_iter().map(Into::into).collect();
        DatasetDef { stages: vec![Stage::WebDataset { files }] }
    }
    /// Source: the rows of Parquet files, every column (see [`ParquetSource`] for
    /// the other fields).
    ///
    /// [`ParquetSource`]: crate::formats::parquet::ParquetSource
    pub fn parquet<S: Into<String>>(files: Vec<S>) -> Self {
        DatasetDef {
            stages: vec![Stage::Parquet(crate::formats::parquet::ParquetSource::new(files))],
        }
    }
    pub fn flat_map(self, name: &str, args: Vec<Arg>) -> Self {
        self.then(Stage::FlatMap(FnCall::new(name, args)))
    }
    pub fn interleave(self, name: &str, cycle_length: u32, block_length: u32) -> Self {
        self.then(Stage::Interleave {
            name: name.to_string(),
            args: vec![],
            cycle_length,
            block_length,
            num_parallel_calls: 1,
        })
    }
    pub fn zip(self, others: Vec<DatasetDef>) -> Self {
        self.then(Stage::Zip { datasets: others })
    }
    pub fn concatenate(self, other: DatasetDef) -> Self {
        self.then(Stage::Concatenate { dataset: Box::new(other) })
    }
    pub fn enumerate(self, start: i64) -> Self {
        self.then(Stage::Enumerate { start })
    }
    pub fn shard(self, num_shards: ShardArg, index: ShardArg) -> Self {
        self.then(Stage::Shard { num_shards, index })
    }
    pub fn parse_example(self, features: Vec<FeatureSpec>) -> Self {
        self.then(Stage::ParseExample { features })
    }
    pub fn filter(self, name: &str) -> Self {
        self.filter_with(name, vec![])
    }
    pub fn filter_with(self, name: &str, args: Vec<Arg>) -> Self {
        self.then(Stage::Filter(FnCall::new(name, args)))
    }
    pub fn batch(self, size: u64, drop_remainder: bool) -> Self {
        self.then(Stage::Batch { size, drop_remainder })
    }
    pub fn shuffle(self, buffer_size: u64, seed: u64) -> Self {
        self.then(Stage::Shuffle { buffer_size, seed })
    }
    pub fn repeat(self, count: u64) -> Self {
        self.then(Stage::Repeat { count: Some(count) })
    }
    pub fn repeat_forever(self) -> Self {
        self.then(Stage::Repeat { count: None })
    }
    pub fn take(self, count: u64) -> Self {
        self.then(Stage::Take { count })
    }
    pub fn skip(self, count: u64) -> Self {
        self.then(Stage::Skip { count })
    }
    pub fn prefetch(self, buffer_size: u64) -> Self {
        self.then(Stage::Prefetch { buffer_size })
    }
    /// A stage running a Python function (see [`crate::python::PythonStage`]).
    pub fn python(self, stage: crate::python::PythonStage) -> Self {
        self.then(Stage::Python(stage))
    }
    /// Skips elements that failed in a user function upstream.
    pub fn ignore_errors(self) -> Self {
        self.then(Stage::IgnoreErrors {})
    }

    /// Checks the structure (not the function names; see
    /// `FunctionRegistry::check`): a source first and only first, sizes positive,
    /// `range` step non-zero, nested pipelines likewise. Errors name the field, e.g.
    /// `stages[2].batch.size` or `stages[1].zip.datasets[0].stages[0]`.
    pub fn validate(&self) -> Result<(), DatasetError> {
        self.check_size()?;
        self.validate_at("")
    }

    /// The bounds that keep a pipeline's executor within a thread's stack: at most
    /// [`MAX_STAGES`] stages in all (nested pipelines included) and [`MAX_NESTING`]
    /// levels of `zip` / `concatenate`. Walked with an explicit stack, so a hostile
    /// spec cannot overflow this check either.
    fn check_size(&self) -> Result<(), DatasetError> {
        let mut pending = vec![(self, 0usize)];
        let mut total = 0usize;
        while let Some((def, depth)) = pending.pop() {
            if depth > MAX_NESTING {
                return Err(DatasetError::InvalidSpec {
                    field: "stages".into(),
                    message: format!(
                        "pipelines nest more than {MAX_NESTING} levels deep (zip or concatenate \
                         inside zip or concatenate); flatten the pipeline"
                    ),
                });
            }
            total = total.saturating_add(def.stages.len());
            if total > MAX_STAGES {
                return Err(DatasetError::InvalidSpec {
                    field: "stages".into(),
                    message: format!(
                        "the pipeline has more than {MAX_STAGES} stages (nested pipelines \
                         included); at most {MAX_STAGES} are allowed: merge repeated stages \
                         (one take, one map with several arguments) or split the work"
                    ),
                });
            }
            for stage in &def.stages {
                match stage {
                    Stage::Zip { datasets } => {
                        pending.extend(datasets.iter().map(|d| (d, depth + 1)));
                    }
                    Stage::Concatenate { dataset } => pending.push((dataset, depth + 1)),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn validate_at(&self, prefix: &str) -> Result<(), DatasetError> {
        let bad = |i: usize, field: &str, message: &str| DatasetError::InvalidSpec {
            field: format!("{prefix}stages[{i}]{field}"),
            message: message.to_string(),
        };
        const SOURCES: &str =
            "range, from_tensor_slices, list_files, tfrecord, text_lines, webdataset or parquet";
        if self.stages.is_empty() {
            return Err(DatasetError::InvalidSpec {
                field: format!("{prefix}stages"),
                message: format!("a pipeline needs at least a source stage ({SOURCES})"),
            });
        }
        for (i, stage) in self.stages.iter().enumerate() {
            let name = stage.op_name();
            if i == 0 && !stage.is_source() {
                return Err(bad(
                    i,
                    &format!(".{name}"),
                    &format!("the first stage must be a source ({SOURCES})"),
                ));
            }
            if i > 0 && stage.is_source() {
                return Err(bad(i, &format!(".{name}"), "a source may only be the first stage"));
            }
            check_bounds(stage).map_err(|(field, m)| bad(i, &field, &m))?;
            match stage {
                Stage::Range { step: 0, .. } => {
                    return Err(bad(i, ".range.step", "must not be 0"));
                }
                Stage::FromTensorSlices(values) => {
                    values.check().map_err(|(field, message)| {
                        bad(i, &format!(".from_tensor_slices{field}"), &message)
                    })?;
                }
                Stage::Batch { size: 0, .. } => return Err(bad(i, ".batch.size", "must be > 0")),
                Stage::Python(p) => {
                    p.check().map_err(|(field, message)| bad(i, &field, &message))?;
                }
                Stage::Shuffle { buffer_size: 0, .. } => {
                    return Err(bad(i, ".shuffle.buffer_size", "must be > 0"));
                }
                Stage::Prefetch { buffer_size: 0, .. } => {
                    return Err(bad(i, ".prefetch.buffer_size", "must be > 0"));
                }
                Stage::ListFiles { pattern, .. } if pattern.is_empty() => {
                    return Err(bad(i, ".list_files.pattern", "must not be empty"));
                }
                Stage::TfRecord { files, .. } if files.is_empty() => {
                    return Err(bad(i, ".tfrecord.files", "must name at least one file"));
                }
                Stage::TextLines { files } if files.is_empty() => {
                    return Err(bad(i, ".text_lines.files", "must name at least one file"));
                }
                Stage::WebDataset { files } if files.is_empty() => {
                    return Err(bad(i, ".webdataset.files", "must name at least one file"));
                }
                Stage::Parquet(p) => {
                    p.check().map_err(|(field, message)| bad(i, &field, &message))?;
                }
                Stage::Map { name: f, .. } | Stage::Interleave { name: f, .. } if f.is_empty() => {
                    return Err(bad(i, &format!(".{name}.fn"), "must name a function"));
                }
                Stage::Filter(f) | Stage::FlatMap(f) if f.name.is_empty() => {
                    return Err(bad(i, &format!(".{name}.fn"), "must name a function"));
                }
                Stage::Map { num_parallel_calls, .. }
                | Stage::Interleave { num_parallel_calls, .. }
                    if *num_parallel_calls > MAX_PARALLEL_CALLS =>
                {
                    return Err(bad(
                        i,
                        &format!(".{name}.num_parallel_calls"),
                        &format!("must be at most {MAX_PARALLEL_CALLS} (0 = one per core)"),
                    ));
                }
                Stage::Interleave { cycle_length, .. }
                    if *cycle_length == 0 || *cycle_length > MAX_CYCLE_LENGTH =>
                {
                    return Err(bad(
                        i,
                        ".interleave.cycle_length",
                        &format!("must be in 1..={MAX_CYCLE_LENGTH}"),
                    ));
                }
                Stage::Interleave { block_length: 0, .. } => {
                    return Err(bad(i, ".interleave.block_length", "must be > 0"));
                }
                Stage::Zip { datasets } => {
                    if datasets.is_empty() {
                        return Err(bad(i, ".zip.datasets", "must hold at least one pipeline"));
                    }
                    for (j, d) in datasets.iter().enumerate() {
                        d.validate_at(&format!("{prefix}stages[{i}].zip.datasets[{j}]."))?;
                    }
                }
                Stage::Concatenate { dataset } => {
                    dataset.validate_at(&format!("{prefix}stages[{i}].concatenate.dataset."))?;
                }
                Stage::Shard { num_shards, index } => match (num_shards, index) {
                    (ShardArg::Value(0), _) => {
                        return Err(bad(i, ".shard.num_shards", "must be > 0"));
                    }
                    (ShardArg::Value(n), ShardArg::Value(k)) if k >= n => {
                        return Err(bad(
                            i,
                            ".shard.index",
                            &format!("must be below num_shards ({n}), got {k}"),
                        ));
                    }
                    _ => {}
                },
                Stage::ParseExample { features } => {
                    if features.is_empty() {
                        return Err(bad(i, ".parse_example.features", "must list a feature"));
                    }
                    let mut seen = std::collections::BTreeSet::new();
                    for (j, f) in features.iter().enumerate() {
                        use crate::tensor::DType;
                        let field = format!(".parse_example.features[{j}]");
                        if !seen.insert(f.name.as_str()) {
                            return Err(bad(i, &field, &format!("`{}` listed twice", f.name)));
                        }
                        if !matches!(
                            f.dtype,
                            DType::Int64 | DType::Float32 | DType::Bytes | DType::String
                        ) {
                            return Err(bad(
                                i,
                                &format!("{field}.dtype"),
                                "must be int64, float32, bytes or string (the tf.train.Feature lists)",
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every function call in the pipeline, nested pipelines included, with the
    /// index of the top-level stage it belongs to.
    pub fn function_calls(&self) -> Vec<(usize, FnKind, FnCall)> {
        let mut out = Vec::new();
        for (i, s) in self.stages.iter().enumerate() {
            match s {
                Stage::Map { name, args, .. } => {
                    out.push((i, FnKind::Map, FnCall::new(name.clone(), args.clone())));
                }
                Stage::Filter(f) => out.push((i, FnKind::Filter, f.clone())),
                Stage::FlatMap(f) => out.push((i, FnKind::Dataset, f.clone())),
                Stage::Interleave { name, args, .. } => {
                    out.push((i, FnKind::Dataset, FnCall::new(name.clone(), args.clone())));
                }
                Stage::Zip { datasets } => {
                    for d in datasets {
                        out.extend(d.function_calls().into_iter().map(|(_, k, c)| (i, k, c)));
                    }
                }
                Stage::Concatenate { dataset } => {
                    out.extend(dataset.function_calls().into_iter().map(|(_, k, c)| (i, k, c)));
                }
                _ => {}
            }
        }
        out
    }

    /// Number of split units of the source stage per epoch, if known: elements of
    /// `range` / `from_tensor_slices`, files of a file source (`list_files` once
    /// resolved). Dynamic sharding splits `[0, source_cardinality)`.
    pub fn source_cardinality(&self) -> Option<u64> {
        match self.stages.first()? {
            Stage::Range { start, stop, step } => Some(range_len(*start, *stop, *step)),
            Stage::FromTensorSlices(v) => Some(v.len() as u64),
            Stage::ListFiles { files, .. } => files.as_ref().map(|f| f.len() as u64),
            Stage::TfRecord { files, .. }
            | Stage::TextLines { files }
            | Stage::WebDataset { files } => Some(files.len() as u64),
            Stage::Parquet(p) => p.is_resolved().then(|| p.units()),
            _ => None,
        }
    }
}

/// The memory-sizing parameters of `stage` against `bounds`; `Err((field, message))`
/// names the field under the stage and the limit.
fn check_bounds(stage: &Stage) -> Result<(), (String, String)> {
    use crate::bounds::{at_most, MAX_BATCH_SIZE, MAX_SHUFFLE_BUFFER};
    match stage {
        Stage::Batch { size, .. } => at_most(*size, MAX_BATCH_SIZE, "MAX_BATCH_SIZE")
            .map_err(|m| (".batch.size".to_string(), m)),
        Stage::Shuffle { buffer_size, .. } => {
            at_most(*buffer_size, MAX_SHUFFLE_BUFFER, "MAX_SHUFFLE_BUFFER")
                .map_err(|m| (".shuffle.buffer_size".to_string(), m))
        }
        Stage::ParseExample { features } => features.iter().enumerate().try_for_each(|(j, f)| {
            let Some(shape) = &f.shape else { return Ok(()) };
            let default_len = match (&f.default, f.dtype) {
                (Some(Arg::Str(s)), crate::tensor::DType::Bytes | crate::tensor::DType::String) => {
                    Some(s.len())
                }
                _ => None,
            };
            crate::bounds::feature(shape, default_len)
                .map_err(|(field, m)| (format!(".parse_example.features[{j}]{field}"), m))
        }),
        _ => Ok(()),
    }
}

/// Upper bound of the stages of a pipeline, nested pipelines included. Stages are
/// nested iterators: each adds frames to every `next` call of the pipeline's
/// thread, so the count must be bounded for the default 2 MiB thread stack
/// (20,000 `take` stages overflowed a worker's stack and aborted it).
pub const MAX_STAGES: usize = 256;
/// Upper bound of how deep `zip` / `concatenate` pipelines nest.
pub const MAX_NESTING: usize = 8;

/// Upper bound of `num_parallel_calls` (map, interleave): threads per stage.
pub const MAX_PARALLEL_CALLS: u32 = 64;
/// Upper bound of `interleave.cycle_length`: inputs open at once.
pub const MAX_CYCLE_LENGTH: u32 = 1024;

/// Number of values of `range(start, stop, step)`.
pub fn range_len(start: i64, stop: i64, step: i64) -> u64 {
    let (start, stop, step) = (start as i128, stop as i128, step as i128);
    if step > 0 && stop > start {
        ((stop - start + step - 1) / step) as u64
    } else if step < 0 && stop < start {
        ((start - stop + (-step) - 1) / (-step)) as u64
    } else {
        0
    }
}
