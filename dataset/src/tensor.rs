//! Tensors and elements: the values that flow through a pipeline and over the wire.
//!
//! A [`Tensor`] keeps its payload in one [`Bytes`] so that moving it from the
//! executor to the worker's buffer, into a gRPC message and out again at the client
//! is a reference-count bump, not a copy. Fixed-width dtypes are little-endian,
//! row-major; `String`/`Bytes` items are each a u32 little-endian length followed by
//! the item's bytes (see `proto/sluice.proto`).

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes before each `String`/`Bytes` item of a payload: its u32 little-endian length.
pub const ITEM_PREFIX: usize = 4;
use serde::{Deserialize, Serialize};
use sluice_positions::Tag;

use crate::error::DatasetError;

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    Int64,
    Float32,
    Float64,
    String,
    Bytes,
    Bool,
    /// Unsigned bytes, e.g. decoded image pixels.
    Uint8,
    /// 32-bit signed integers, e.g. packed token ids (half the bytes of int64).
    Int32,
}

impl DType {
    /// Width in bytes of one value, `None` for variable-length dtypes.
    pub fn width(self) -> Option<usize> {
        match self {
            DType::Int64 | DType::Float64 => Some(8),
            DType::Float32 | DType::Int32 => Some(4),
            DType::Bool | DType::Uint8 => Some(1),
            DType::String | DType::Bytes => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Int64 => "int64",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::String => "string",
            DType::Bytes => "bytes",
            DType::Bool => "bool",
            DType::Uint8 => "uint8",
            DType::Int32 => "int32",
        }
    }
}

/// A dense tensor: dtype, shape and payload.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<u64>,
    data: Bytes,
}

impl Tensor {
    /// Builds a tensor, checking that `data` holds exactly `shape`'s number of values.
    pub fn new(dtype: DType, shape: Vec<u64>, data: Bytes) -> Result<Self, DatasetError> {
        let t = Tensor { dtype, shape, data };
        t.check()?;
        Ok(t)
    }

    fn check(&self) -> Result<(), DatasetError> {
        let bad = |what: String| DatasetError::BadTensor(what);
        // The shape may come from the network: its product must not wrap (a wrapped
        // product of 0 would let an empty payload claim 2^64 values), and each
        // dimension must fit the int64 dims numpy and TensorFlow use.
        let n = self.shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d)).ok_or_else(|| {
            bad(format!(
                "{} tensor of shape {:?}: the shape overflows",
                self.dtype.name(),
                self.shape
            ))
        })?;
        if let Some(d) = self.shape.iter().find(|d| **d > i64::MAX as u64) {
            return Err(bad(format!("dimension {d} of shape {:?} exceeds i64::MAX", self.shape)));
        }
        match self.dtype.width() {
            Some(w) => {
                let want = n.checked_mul(w as u64).ok_or_else(|| {
                    bad(format!(
                        "{} tensor of shape {:?}: the shape overflows",
                        self.dtype.name(),
                        self.shape
                    ))
                })?;
                if self.data.len() as u64 != want {
                    return Err(bad(format!(
                        "{} tensor of shape {:?} needs {} bytes, got {}",
                        self.dtype.name(),
                        self.shape,
                        want,
                        self.data.len()
                    )));
                }
            }
            None => {
                let items = walk_items(&self.data, |_| {})?;
                if items != n {
                    return Err(bad(format!(
                        "{} tensor of shape {:?} needs {} items, got {}",
                        self.dtype.name(),
                        self.shape,
                        n,
                        items
                    )));
                }
            }
        }
        Ok(())
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }
    /// The raw payload (see the module docs for its layout).
    pub fn data(&self) -> &Bytes {
        &self.data
    }
    /// Number of values: the product of the shape (1 for a scalar). Every tensor
    /// was checked at construction, so this does not overflow.
    pub fn num_values(&self) -> u64 {
        self.shape.iter().product()
    }
    /// Payload size in bytes.
    pub fn byte_len(&self) -> usize {
        self.data.len()
    }

    pub fn from_i64s(shape: Vec<u64>, values: &[i64]) -> Result<Self, DatasetError> {
        let mut b = BytesMut::with_capacity(values.len() * 8);
        values.iter().for_each(|v| b.put_i64_le(*v));
        Tensor::new(DType::Int64, shape, b.freeze())
    }
    pub fn from_i32s(shape: Vec<u64>, values: &[i32]) -> Result<Self, DatasetError> {
        let mut b = BytesMut::with_capacity(values.len() * 4);
        values.iter().for_each(|v| b.put_i32_le(*v));
        Tensor::new(DType::Int32, shape, b.freeze())
    }
    pub fn from_f32s(shape: Vec<u64>, values: &[f32]) -> Result<Self, DatasetError> {
        let mut b = BytesMut::with_capacity(values.len() * 4);
        values.iter().for_each(|v| b.put_f32_le(*v));
        Tensor::new(DType::Float32, shape, b.freeze())
    }
    pub fn from_f64s(shape: Vec<u64>, values: &[f64]) -> Result<Self, DatasetError> {
        let mut b = BytesMut::with_capacity(values.len() * 8);
        values.iter().for_each(|v| b.put_f64_le(*v));
        Tensor::new(DType::Float64, shape, b.freeze())
    }
    pub fn from_bools(shape: Vec<u64>, values: &[bool]) -> Result<Self, DatasetError> {
        let data: Vec<u8> = values.iter().map(|v| *v as u8).collect();
        Tensor::new(DType::Bool, shape, Bytes::from(data))
    }
    pub fn from_u8s(shape: Vec<u64>, values: impl Into<Bytes>) -> Result<Self, DatasetError> {
        Tensor::new(DType::Uint8, shape, values.into())
    }
    /// A `String` (`utf8 = true`) or `Bytes` tensor from its items.
    pub fn from_items<I: AsRef<[u8]>>(
        dtype: DType,
        shape: Vec<u64>,
        items: &[I],
    ) -> Result<Self, DatasetError> {
        if dtype.width().is_some() {
            return Err(DatasetError::BadTensor(format!(
                "from_items needs string or bytes, not {}",
                dtype.name()
            )));
        }
        let total: usize = items.iter().map(|i| 4 + i.as_ref().len()).sum();
        let mut b = BytesMut::with_capacity(total);
        for item in items {
            let item = item.as_ref();
            let len = u32::try_from(item.len())
                .map_err(|_| DatasetError::BadTensor("item longer than 4 GiB".into()))?;
            b.put_u32_le(len);
            b.put_slice(item);
        }
        Tensor::new(dtype, shape, b.freeze())
    }

    pub fn scalar_i64(v: i64) -> Self {
        Self::from_i64s(vec![], &[v]).expect("scalar shape is consistent")
    }
    pub fn scalar_i32(v: i32) -> Self {
        Self::from_i32s(vec![], &[v]).expect("scalar shape is consistent")
    }
    pub fn scalar_f32(v: f32) -> Self {
        Self::from_f32s(vec![], &[v]).expect("scalar shape is consistent")
    }
    pub fn scalar_f64(v: f64) -> Self {
        Self::from_f64s(vec![], &[v]).expect("scalar shape is consistent")
    }
    pub fn scalar_bool(v: bool) -> Self {
        Self::from_bools(vec![], &[v]).expect("scalar shape is consistent")
    }
    pub fn scalar_str(v: &str) -> Self {
        Self::from_items(DType::String, vec![], &[v]).expect("scalar shape is consistent")
    }
    pub fn scalar_bytes(v: &[u8]) -> Self {
        Self::from_items(DType::Bytes, vec![], &[v]).expect("scalar shape is consistent")
    }

    /// A `String` or `Bytes` scalar made in place: `framed` is [`ITEM_PREFIX`]
    /// spare bytes (the item's length is written there) followed by the item. What
    /// `from_items` makes of one item, without copying it (file readers read into
    /// such a buffer). `None` for a fixed-width dtype, a `framed` shorter than the
    /// prefix, or an item longer than a u32.
    pub fn scalar_item_framed(dtype: DType, mut framed: Vec<u8>) -> Option<Self> {
        if dtype.width().is_some() {
            return None;
        }
        let len = u32::try_from(framed.len().checked_sub(ITEM_PREFIX)?).ok()?;
        framed[..ITEM_PREFIX].copy_from_slice(&len.to_le_bytes());
        Some(Tensor { dtype, shape: vec![], data: Bytes::from(framed) })
    }

    fn expect_dtype(&self, want: DType) -> Result<(), DatasetError> {
        if self.dtype != want {
            return Err(DatasetError::TypeMismatch {
                expected: want.name().to_string(),
                found: self.dtype.name().to_string(),
            });
        }
        Ok(())
    }

    pub fn i64_values(&self) -> Result<Vec<i64>, DatasetError> {
        self.expect_dtype(DType::Int64)?;
        Ok(self.data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect())
    }
    pub fn i32_values(&self) -> Result<Vec<i32>, DatasetError> {
        self.expect_dtype(DType::Int32)?;
        Ok(self.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect())
    }
    pub fn f32_values(&self) -> Result<Vec<f32>, DatasetError> {
        self.expect_dtype(DType::Float32)?;
        Ok(self.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
    }
    pub fn f64_values(&self) -> Result<Vec<f64>, DatasetError> {
        self.expect_dtype(DType::Float64)?;
        Ok(self.data.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect())
    }
    pub fn bool_values(&self) -> Result<Vec<bool>, DatasetError> {
        self.expect_dtype(DType::Bool)?;
        Ok(self.data.iter().map(|b| *b != 0).collect())
    }
    /// Items of a `String` or `Bytes` tensor, as zero-copy slices of the payload.
    pub fn items(&self) -> Result<Vec<Bytes>, DatasetError> {
        if self.dtype.width().is_some() {
            return Err(DatasetError::TypeMismatch {
                expected: "string or bytes".into(),
                found: self.dtype.name().to_string(),
            });
        }
        split_items(&self.data)
    }

    /// The value of a scalar int64 tensor.
    pub fn as_i64(&self) -> Result<i64, DatasetError> {
        self.expect_scalar()?;
        Ok(self.i64_values()?[0])
    }
    fn expect_scalar(&self) -> Result<(), DatasetError> {
        if !self.shape.is_empty() {
            return Err(DatasetError::TypeMismatch {
                expected: "a scalar".into(),
                found: format!("shape {:?}", self.shape),
            });
        }
        Ok(())
    }

    /// A JSON rendering: numbers, strings (bytes as lossy UTF-8), nested arrays by shape.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        let flat: Vec<Value> = match self.dtype {
            DType::Int64 => self.i64_values().unwrap().into_iter().map(Value::from).collect(),
            DType::Float32 => self.f32_values().unwrap().into_iter().map(Value::from).collect(),
            DType::Float64 => self.f64_values().unwrap().into_iter().map(Value::from).collect(),
            DType::Bool => self.bool_values().unwrap().into_iter().map(Value::from).collect(),
            DType::Uint8 => self.data.iter().map(|b| Value::from(*b)).collect(),
            DType::Int32 => self.i32_values().unwrap().into_iter().map(Value::from).collect(),
            DType::String | DType::Bytes => self
                .items()
                .unwrap()
                .iter()
                .map(|b| Value::from(String::from_utf8_lossy(b).into_owned()))
                .collect(),
        };
        nest(&flat, &self.shape)
    }
}

fn nest(flat: &[serde_json::Value], shape: &[u64]) -> serde_json::Value {
    match shape.split_first() {
        None => flat.first().cloned().unwrap_or(serde_json::Value::Null),
        Some((&d, rest)) => {
            let stride: usize = rest.iter().product::<u64>() as usize;
            let rows =
                (0..d as usize).map(|i| nest(&flat[i * stride..(i + 1) * stride], rest)).collect();
            serde_json::Value::Array(rows)
        }
    }
}

fn split_items(data: &Bytes) -> Result<Vec<Bytes>, DatasetError> {
    let mut out = Vec::new();
    walk_items(data, |item| out.push(data.slice(item)))?;
    Ok(out)
}

/// Walks the `[u32 LE length][bytes]` items of a string or bytes payload, giving
/// `each` every item's range, and returns how many there are. Allocates nothing:
/// checking a tensor counts its items this way, because a 64 MiB payload of empty
/// items is 16 million of them, and collecting their slices took 512 MiB (found by
/// fuzzing).
fn walk_items(
    data: &[u8],
    mut each: impl FnMut(std::ops::Range<usize>),
) -> Result<u64, DatasetError> {
    let mut count = 0u64;
    let mut at = 0usize;
    while at < data.len() {
        if data.len() - at < 4 {
            return Err(DatasetError::BadTensor(format!("truncated item length at byte {at}")));
        }
        let len = u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        at += 4;
        if data.len() - at < len {
            return Err(DatasetError::BadTensor(format!(
                "item at byte {} claims {len} bytes, {} remain",
                at - 4,
                data.len() - at
            )));
        }
        each(at..at + len);
        count += 1;
        at += len;
    }
    Ok(count)
}

/// One element of a dataset: a tuple of tensors.
#[derive(Clone, Debug, PartialEq)]
pub struct Element {
    pub components: Vec<Tensor>,
    /// One name per component (e.g. the features of a parsed `tf.train.Example`),
    /// shared between the elements of one stage; `None` for a plain tuple.
    pub names: Option<Arc<[String]>>,
    /// Exactly-once pipelines only (`DatasetDef::iter_tagged`): the source records
    /// this element stands for (docs/exactly-once.md), one run inline (no
    /// allocation for an element of one record). `None` in every other pipeline.
    pub origin: Option<Tag>,
}

impl Element {
    pub fn new(components: Vec<Tensor>) -> Self {
        Element { components, names: None, origin: None }
    }
    /// A one-component element.
    pub fn single(t: Tensor) -> Self {
        Element { components: vec![t], names: None, origin: None }
    }
    /// An element with named components; `names` and `components` must have the
    /// same length.
    pub fn named(
        names: impl Into<Arc<[String]>>,
        components: Vec<Tensor>,
    ) -> Result<Self, DatasetError> {
        let names = names.into();
        if names.len() != components.len() {
            return Err(DatasetError::BadTensor(format!(
                "{} names for {} components",
                names.len(),
                components.len()
            )));
        }
        Ok(Element { components, names: Some(names), origin: None })
    }
    /// The index of the component called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.as_deref()?.iter().position(|n| n == name)
    }
    /// The component called `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.index_of(name).and_then(|i| self.components.get(i))
    }
    /// Total payload bytes over all components.
    pub fn byte_len(&self) -> usize {
        self.components.iter().map(Tensor::byte_len).sum()
    }
    /// The value of a one-component scalar int64 element (what `range` produces).
    pub fn as_i64(&self) -> Result<i64, DatasetError> {
        match self.components.as_slice() {
            [t] => t.as_i64(),
            _ => Err(DatasetError::TypeMismatch {
                expected: "one component".into(),
                found: format!("{} components", self.components.len()),
            }),
        }
    }
    /// JSON: a one-component element is its tensor's value, a tuple is an array.
    pub fn to_json(&self) -> serde_json::Value {
        if let Some(names) = &self.names {
            let fields = names.iter().cloned().zip(self.components.iter().map(Tensor::to_json));
            return serde_json::Value::Object(fields.collect());
        }
        match self.components.as_slice() {
            [t] => t.to_json(),
            many => serde_json::Value::Array(many.iter().map(Tensor::to_json).collect()),
        }
    }
}
