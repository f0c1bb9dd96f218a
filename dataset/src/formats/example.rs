//! `tf.train.Example`: the messages (generated from `proto/tensorflow/example.proto`,
//! TensorFlow's field numbers, by the vendored protoc in `build.rs`) and [`parse`],
//! which turns one serialized Example into an [`Element`] with one named component
//! per [`FeatureSpec`].
//!
//! Decoding from [`Bytes`] keeps `bytes_list` values as slices of the record (no
//! copy until they are packed into a tensor).

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use crate::def::{Arg, FeatureSpec};
use crate::error::DatasetError;
use crate::tensor::{DType, Element, Tensor};

/// The generated messages of `proto/tensorflow/example.proto` (package
/// `tensorflow`).
mod generated {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/tensorflow.rs"));
}

pub use generated::feature::Kind;
pub use generated::{BytesList, Example, Feature, Features, FloatList, Int64List};

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::BytesList(_) => "bytes_list",
            Kind::FloatList(_) => "float_list",
            Kind::Int64List(_) => "int64_list",
        }
    }
}

impl Feature {
    pub fn bytes<B: Into<Bytes>>(values: impl IntoIterator<Item = B>) -> Self {
        let value = values.into_iter().map(Into::into).collect();
        Feature { kind: Some(Kind::BytesList(BytesList { value })) }
    }
    pub fn floats(value: Vec<f32>) -> Self {
        Feature { kind: Some(Kind::FloatList(FloatList { value })) }
    }
    pub fn ints(value: Vec<i64>) -> Self {
        Feature { kind: Some(Kind::Int64List(Int64List { value })) }
    }
}

/// Serializes an Example made of `features` (for writers and tests).
pub fn encode(features: impl IntoIterator<Item = (String, Feature)>) -> Vec<u8> {
    let feature = features.into_iter().collect();
    Example { features: Some(Features { feature }) }.encode_to_vec()
}

/// The list kind a dtype is read from.
fn kind_for(dtype: DType) -> &'static str {
    match dtype {
        DType::Int64 => "int64_list",
        DType::Float32 => "float_list",
        _ => "bytes_list",
    }
}

/// The component names of `features`, built once per stage and shared.
pub fn names(features: &[FeatureSpec]) -> Arc<[String]> {
    features.iter().map(|f| f.name.clone()).collect()
}

/// Parses one serialized Example into one component per spec, named by `names`
/// (from [`names`]`(features)`).
pub fn parse(
    record: Bytes,
    features: &[FeatureSpec],
    names: &Arc<[String]>,
) -> Result<Element, DatasetError> {
    super::example_bounds::check(&record)?;
    let example = Example::decode(record).map_err(|e| {
        DatasetError::BadExample(format!("the record is not a tf.train.Example: {e}"))
    })?;
    let mut map = example.features.map(|f| f.feature).unwrap_or_default();
    let components = features
        .iter()
        .map(|spec| component(spec, map.remove(&spec.name)))
        .collect::<Result<Vec<_>, _>>()?;
    Element::named(names.clone(), components)
}

fn bad(spec: &FeatureSpec, message: String) -> DatasetError {
    DatasetError::BadExample(format!("feature `{}`: {message}", spec.name))
}

/// One feature's tensor: its values (or the default) in the spec's shape.
fn component(spec: &FeatureSpec, feature: Option<Feature>) -> Result<Tensor, DatasetError> {
    let Some(feature) = feature else {
        return missing(spec);
    };
    let count = |n: usize| -> Result<Vec<u64>, DatasetError> {
        match &spec.shape {
            None => Ok(vec![n as u64]),
            Some(shape) => {
                // Validated specs keep this below `bounds::MAX_FEATURE_VALUES`.
                let want = crate::bounds::feature_values(shape).unwrap_or(u64::MAX);
                if want != n as u64 {
                    return Err(bad(
                        spec,
                        format!("expected {want} values (shape {shape:?}), found {n}"),
                    ));
                }
                Ok(shape.clone())
            }
        }
    };
    let tensor = match (spec.dtype, feature.kind) {
        // An empty Feature has no kind: zero values of whatever kind is expected.
        (dtype, None) => empty(dtype, count(0)?),
        (DType::Int64, Some(Kind::Int64List(l))) => {
            Tensor::from_i64s(count(l.value.len())?, &l.value)
        }
        (DType::Float32, Some(Kind::FloatList(l))) => {
            Tensor::from_f32s(count(l.value.len())?, &l.value)
        }
        (dtype @ (DType::Bytes | DType::String), Some(Kind::BytesList(l))) => {
            Tensor::from_items(dtype, count(l.value.len())?, &l.value)
        }
        (dtype, Some(kind)) => {
            return Err(bad(
                spec,
                format!(
                    "expected {} (for dtype {}), found {}",
                    kind_for(dtype),
                    dtype.name(),
                    kind.name()
                ),
            ));
        }
    };
    tensor.map_err(|e| bad(spec, e.to_string()))
}

fn empty(dtype: DType, shape: Vec<u64>) -> Result<Tensor, DatasetError> {
    match dtype {
        DType::Int64 => Tensor::from_i64s(shape, &[]),
        DType::Float32 => Tensor::from_f32s(shape, &[]),
        _ => Tensor::from_items::<&[u8]>(dtype, shape, &[]),
    }
}

/// An absent feature: the default broadcast to the fixed shape (or one value for
/// a variable-length feature); without a default, an error for a fixed shape and
/// an empty 1-D tensor for a variable-length one (like tf's `VarLenFeature`).
fn missing(spec: &FeatureSpec) -> Result<Tensor, DatasetError> {
    let Some(default) = &spec.default else {
        return match &spec.shape {
            Some(_) => Err(bad(spec, "missing from the Example and no default given".into())),
            None => empty(spec.dtype, vec![0]),
        };
    };
    let shape = spec.shape.clone().unwrap_or_else(|| vec![1]);
    let n = crate::bounds::feature_values(&shape)
        .filter(|&n| n <= crate::bounds::MAX_FEATURE_VALUES)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| bad(spec, format!("shape {shape:?} too large (MAX_FEATURE_VALUES)")))?;
    let wrong =
        || bad(spec, format!("default {default:?} does not fit dtype {}", spec.dtype.name()));
    let t = match (spec.dtype, default) {
        (DType::Int64, Arg::Int(v)) => Tensor::from_i64s(shape, &vec![*v; n]),
        (DType::Float32, Arg::Float(v)) => Tensor::from_f32s(shape, &vec![*v as f32; n]),
        (DType::Float32, Arg::Int(v)) => Tensor::from_f32s(shape, &vec![*v as f32; n]),
        // One item's encoding repeated: no slice per value on the way.
        (DType::Bytes | DType::String, Arg::Str(s)) => {
            Tensor::from_items(spec.dtype, vec![], &[s.as_bytes()])
                .and_then(|one| Tensor::new(spec.dtype, shape, Bytes::from(one.data().repeat(n))))
        }
        _ => return Err(wrong()),
    };
    t.map_err(|e| bad(spec, e.to_string()))
}
