//! The values of a `from_tensor_slices` source: its JSON forms and their checks.
//!
//! Two kinds of form, exactly one per source:
//! - the simple lists `ints`, `floats`, `strings`, `bytes`: each value is one scalar
//!   element;
//! - `tensors` (with optional `names`): tf.data's general form. Each tensor has a
//!   dtype, a shape of rank ≥ 1 and a payload in the element model's layout,
//!   base64-encoded; element `i` holds every tensor's row `i` (a tuple, or a named
//!   element with `names`).
//!
//! The JSON object has one key per form (`tensors` may come with `names`), so the
//! serde impls are written by hand: the derive of an externally tagged enum allows
//! one key only. A payload that does not match its dtype and shape is refused while
//! parsing, so a [`Tensor`] here is always well formed; the checks across tensors
//! (rank, first dimensions, names) are in [`SliceValues::check`], which
//! `DatasetDef::validate` runs with the stage's path.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::tensor::{DType, Tensor};

/// Values of `from_tensor_slices`.
#[derive(Clone, Debug, PartialEq)]
pub enum SliceValues {
    /// One int64 scalar element per value.
    Ints(Vec<i64>),
    /// One float32 scalar element per value.
    Floats(Vec<f32>),
    /// One string scalar element per value.
    Strings(Vec<String>),
    /// One bytes scalar element per value.
    Bytes(Vec<Vec<u8>>),
    /// Slices of tensors along their first dimension: element `i` has one component
    /// per tensor, `tensors[j]` at row `i` (shape `shape[1..]`), named by `names`
    /// when given.
    Tensors { tensors: Vec<Tensor>, names: Option<Vec<String>> },
}

/// The keys of the JSON form.
const FIELDS: &[&str] = &["ints", "floats", "strings", "bytes", "tensors", "names"];

impl SliceValues {
    /// Number of elements: values of a list, rows of the tensors (their shared first
    /// dimension).
    pub fn len(&self) -> usize {
        match self {
            SliceValues::Ints(v) => v.len(),
            SliceValues::Floats(v) => v.len(),
            SliceValues::Strings(v) => v.len(),
            SliceValues::Bytes(v) => v.len(),
            SliceValues::Tensors { tensors, .. } => tensors
                .first()
                .and_then(|t| t.shape().first())
                .map_or(0, |n| usize::try_from(*n).unwrap_or(usize::MAX)),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks what parsing cannot: every tensor has rank ≥ 1 and the same first
    /// dimension, `names` (if any) one non-empty, distinct name per tensor. The error
    /// is `(path below the op, message)`, e.g. `(".tensors[1]", "first dimension …")`.
    /// Floats must be finite: the JSON form (what the dispatcher stores and
    /// replicates) has no infinity or NaN, so a value beyond float32's range (a JSON
    /// `1e39` read as f32 is infinite) would be written as `null` and never read back.
    pub fn check(&self) -> Result<(), (String, String)> {
        if let SliceValues::Floats(values) = self {
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err((
                    format!(".floats[{i}]"),
                    format!(
                        "{} is not a finite float32 (the largest is about 3.4e38); give a \
                         finite value, or float64 data in the `tensors` form",
                        values[i]
                    ),
                ));
            }
        }
        let SliceValues::Tensors { tensors, names } = self else {
            return Ok(());
        };
        let Some(first) = tensors.first() else {
            return Err((
                ".tensors".into(),
                "must hold at least one tensor; give one tensor per component of the \
                 elements"
                    .into(),
            ));
        };
        for (j, t) in tensors.iter().enumerate() {
            let Some(&rows) = t.shape().first() else {
                return Err((
                    format!(".tensors[{j}].shape"),
                    "is [] (a scalar), which has no first dimension to slice; give each \
                     tensor a shape of rank >= 1 whose first dimension is the number of \
                     elements"
                        .into(),
                ));
            };
            let want = first.shape()[0];
            if rows != want {
                return Err((
                    format!(".tensors[{j}]"),
                    format!(
                        "first dimension {rows} differs from tensors[0]'s {want}; every \
                         tensor is sliced along its first dimension, so they must agree"
                    ),
                ));
            }
        }
        let Some(names) = names else {
            return Ok(());
        };
        if names.len() != tensors.len() {
            return Err((
                ".names".into(),
                format!(
                    "has {} name(s) for {} tensor(s); give one name per tensor, in the \
                     same order, or leave `names` out for unnamed components",
                    names.len(),
                    tensors.len()
                ),
            ));
        }
        for (j, name) in names.iter().enumerate() {
            if name.is_empty() {
                return Err((
                    format!(".names[{j}]"),
                    "is empty; every name must be non-empty".into(),
                ));
            }
            if names[..j].contains(name) {
                return Err((
                    format!(".names[{j}]"),
                    format!("`{name}` is listed twice; names must be distinct"),
                ));
            }
        }
        Ok(())
    }
}

impl Serialize for SliceValues {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let entries = match self {
            SliceValues::Tensors { names: Some(_), .. } => 2,
            _ => 1,
        };
        let mut map = s.serialize_map(Some(entries))?;
        match self {
            SliceValues::Ints(v) => map.serialize_entry("ints", v)?,
            SliceValues::Floats(v) => map.serialize_entry("floats", v)?,
            SliceValues::Strings(v) => map.serialize_entry("strings", v)?,
            SliceValues::Bytes(v) => map.serialize_entry("bytes", v)?,
            SliceValues::Tensors { tensors, names } => {
                let tensors: Vec<SliceTensor<'_>> = tensors.iter().map(SliceTensor).collect();
                map.serialize_entry("tensors", &tensors)?;
                if let Some(names) = names {
                    map.serialize_entry("names", names)?;
                }
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for SliceValues {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SliceValuesVisitor)
    }
}

struct SliceValuesVisitor;

impl<'de> Visitor<'de> for SliceValuesVisitor {
    type Value = SliceValues;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with one of `ints`, `floats`, `strings`, `bytes` or `tensors`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SliceValues, A::Error> {
        let mut form: Option<(&'static str, SliceValues)> = None;
        let mut names: Option<Vec<String>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let field = FIELDS
                .iter()
                .copied()
                .find(|f| *f == key)
                .ok_or_else(|| de::Error::unknown_field(&key, FIELDS))?;
            if field == "names" {
                if names.is_some() {
                    return Err(de::Error::duplicate_field(field));
                }
                names = Some(map.next_value()?);
                continue;
            }
            match &form {
                Some((other, _)) if *other == field => {
                    return Err(de::Error::duplicate_field(field));
                }
                Some((other, _)) => {
                    return Err(de::Error::custom(format!(
                        "has both `{other}` and `{field}`; give exactly one of `ints`, \
                         `floats`, `strings`, `bytes` or `tensors` (`tensors` for elements \
                         with several components)"
                    )));
                }
                None => {}
            }
            let values = match field {
                "ints" => SliceValues::Ints(map.next_value()?),
                "floats" => SliceValues::Floats(map.next_value()?),
                "strings" => SliceValues::Strings(map.next_value()?),
                "bytes" => SliceValues::Bytes(map.next_value()?),
                _ => {
                    let tensors: Vec<TensorSpec> = map.next_value()?;
                    SliceValues::Tensors {
                        tensors: tensors.into_iter().map(|t| t.0).collect(),
                        names: None,
                    }
                }
            };
            form = Some((field, values));
        }
        match (form, names) {
            (None, _) => Err(de::Error::custom(
                "needs exactly one of `ints`, `floats`, `strings`, `bytes` or `tensors`, \
                 and has none",
            )),
            (Some((_, SliceValues::Tensors { tensors, .. })), names) => {
                Ok(SliceValues::Tensors { tensors, names })
            }
            (Some((_, values)), None) => Ok(values),
            (Some((other, _)), Some(_)) => Err(de::Error::custom(format!(
                "`names` goes with `tensors` (one name per tensor), not with `{other}`; \
                 remove `names`, or give the values as `tensors`"
            ))),
        }
    }
}

/// A tensor as the `tensors` form writes it.
struct SliceTensor<'a>(&'a Tensor);

impl Serialize for SliceTensor<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("dtype", &self.0.dtype())?;
        map.serialize_entry("shape", self.0.shape())?;
        map.serialize_entry("base64", &STANDARD.encode(self.0.data()))?;
        map.end()
    }
}

/// A tensor of the `tensors` form, read: its payload decoded and checked against
/// its dtype and shape.
struct TensorSpec(Tensor);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    dtype: DType,
    shape: Vec<u64>,
    #[serde(rename = "base64", deserialize_with = "base64_payload")]
    payload: Vec<u8>,
}

fn base64_payload<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    STANDARD.decode(text.as_bytes()).map_err(|e| {
        de::Error::custom(format!(
            "is not valid base64 ({e}); encode the payload with the standard alphabet \
             (A-Z, a-z, 0-9, +, /) and `=` padding, e.g. Python's base64.b64encode"
        ))
    })
}

impl<'de> Deserialize<'de> for TensorSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawTensor::deserialize(d)?;
        payload_matches(raw.dtype, &raw.shape, &raw.payload).map_err(de::Error::custom)?;
        Tensor::new(raw.dtype, raw.shape, Bytes::from(raw.payload))
            .map(TensorSpec)
            .map_err(de::Error::custom)
    }
}

/// Whether `payload` holds exactly the values of a `dtype` tensor of `shape`, in the
/// element model's layout; the error says what differs and what the layout is.
fn payload_matches(dtype: DType, shape: &[u64], payload: &[u8]) -> Result<(), String> {
    let name = dtype.name();
    let values = shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
    let Some(values) = values else {
        return Err(format!("shape {shape:?} has more values than fit in 64 bits"));
    };
    if let Some(width) = dtype.width() {
        let want = values.checked_mul(width as u64);
        if want != Some(payload.len() as u64) {
            return Err(format!(
                "the payload is {} bytes, but a {name} tensor of shape {shape:?} needs \
                 {values} values x {width} bytes = {} bytes; the payload is the values, \
                 little-endian, in row-major order",
                payload.len(),
                want.map_or("more than 2^64".to_string(), |w| w.to_string()),
            ));
        }
        return Ok(());
    }
    let layout = "each item is a u32 little-endian length followed by that many bytes, \
                  items in row-major order";
    let (mut at, mut items) = (0usize, 0u64);
    while at < payload.len() {
        let Some(len) = payload.get(at..at + 4) else {
            return Err(format!(
                "the payload ends inside the length of item {items} (at byte {at}); {layout}"
            ));
        };
        let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
        if payload.len() - at - 4 < len {
            return Err(format!(
                "item {items} (at byte {at}) claims {len} bytes, but only {} remain; {layout}",
                payload.len() - at - 4
            ));
        }
        at += 4 + len;
        items += 1;
    }
    if items != values {
        return Err(format!(
            "the payload holds {items} items, but a {name} tensor of shape {shape:?} needs \
             {values}; {layout}"
        ));
    }
    Ok(())
}
