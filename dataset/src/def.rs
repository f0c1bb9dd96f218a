//! The dataset definition: a pipeline of stages, its builder API and its checks.
//!
//! A [`DatasetDef`] is a list of [`Stage`]s: the first is a *source* (`range`,
//! `from_tensor_slices`), each later one transforms the stream before it. It is
//! plain data — serialisable to protobuf (see `wire`), to JSON (see `json` and
//! `docs/dataset-spec.md`) and to bincode (the dispatcher's log) — and executed by
//! `exec` on workers and locally.

use serde::{Deserialize, Serialize};

use crate::error::DatasetError;

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

/// Values of `from_tensor_slices`: each value becomes one scalar element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SliceValues {
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Bytes(Vec<Vec<u8>>),
}

impl SliceValues {
    pub fn len(&self) -> usize {
        match self {
            SliceValues::Ints(v) => v.len(),
            SliceValues::Floats(v) => v.len(),
            SliceValues::Strings(v) => v.len(),
            SliceValues::Bytes(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn zero() -> i64 {
    0
}
fn one() -> i64 {
    1
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
    /// Source: one scalar element per value.
    FromTensorSlices(SliceValues),
    Map(FnCall),
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
}

impl Stage {
    /// The JSON / builder name of this stage's op.
    pub fn op_name(&self) -> &'static str {
        match self {
            Stage::Range { .. } => "range",
            Stage::FromTensorSlices(_) => "from_tensor_slices",
            Stage::Map(_) => "map",
            Stage::Filter(_) => "filter",
            Stage::Batch { .. } => "batch",
            Stage::Shuffle { .. } => "shuffle",
            Stage::Repeat { .. } => "repeat",
            Stage::Take { .. } => "take",
            Stage::Skip { .. } => "skip",
            Stage::Prefetch { .. } => "prefetch",
        }
    }
    pub fn is_source(&self) -> bool {
        matches!(self, Stage::Range { .. } | Stage::FromTensorSlices(_))
    }
}

/// Whether a registry function maps elements or filters them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FnKind {
    Map,
    Filter,
}

impl FnKind {
    pub fn name(self) -> &'static str {
        match self {
            FnKind::Map => "map",
            FnKind::Filter => "filter",
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

    fn then(mut self, stage: Stage) -> Self {
        self.stages.push(stage);
        self
    }
    /// Map with a registry function that takes no arguments.
    pub fn map(self, name: &str) -> Self {
        self.map_with(name, vec![])
    }
    pub fn map_with(self, name: &str, args: Vec<Arg>) -> Self {
        self.then(Stage::Map(FnCall::new(name, args)))
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

    /// Checks the structure (not the function names; see
    /// `FunctionRegistry::check`): a source first and only first, sizes positive,
    /// `range` step non-zero. Errors name the field, e.g. `stages[2].batch.size`.
    pub fn validate(&self) -> Result<(), DatasetError> {
        let bad = |i: usize, field: &str, message: &str| DatasetError::InvalidSpec {
            field: format!("stages[{i}]{field}"),
            message: message.to_string(),
        };
        if self.stages.is_empty() {
            return Err(DatasetError::InvalidSpec {
                field: "stages".into(),
                message: "a pipeline needs at least a source stage (range or from_tensor_slices)"
                    .into(),
            });
        }
        for (i, stage) in self.stages.iter().enumerate() {
            let name = stage.op_name();
            if i == 0 && !stage.is_source() {
                return Err(bad(
                    i,
                    &format!(".{name}"),
                    "the first stage must be a source (range or from_tensor_slices)",
                ));
            }
            if i > 0 && stage.is_source() {
                return Err(bad(i, &format!(".{name}"), "a source may only be the first stage"));
            }
            match stage {
                Stage::Range { step: 0, .. } => {
                    return Err(bad(i, ".range.step", "must not be 0"));
                }
                Stage::Batch { size: 0, .. } => return Err(bad(i, ".batch.size", "must be > 0")),
                Stage::Shuffle { buffer_size: 0, .. } => {
                    return Err(bad(i, ".shuffle.buffer_size", "must be > 0"));
                }
                Stage::Prefetch { buffer_size: 0, .. } => {
                    return Err(bad(i, ".prefetch.buffer_size", "must be > 0"));
                }
                Stage::Map(f) | Stage::Filter(f) if f.name.is_empty() => {
                    return Err(bad(i, &format!(".{name}.fn"), "must name a function"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every function call in the pipeline, with its stage index.
    pub fn function_calls(&self) -> impl Iterator<Item = (usize, FnKind, &FnCall)> {
        self.stages.iter().enumerate().filter_map(|(i, s)| match s {
            Stage::Map(f) => Some((i, FnKind::Map, f)),
            Stage::Filter(f) => Some((i, FnKind::Filter, f)),
            _ => None,
        })
    }

    /// Number of elements the source stage produces in one epoch, if the pipeline is
    /// well formed. Dynamic sharding splits `[0, source_cardinality)`.
    pub fn source_cardinality(&self) -> Option<u64> {
        match self.stages.first()? {
            Stage::Range { start, stop, step } => Some(range_len(*start, *stop, *step)),
            Stage::FromTensorSlices(v) => Some(v.len() as u64),
            _ => None,
        }
    }
}

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
