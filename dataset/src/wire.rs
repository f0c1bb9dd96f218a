//! Conversions between this crate's domain types and the protobuf wire types.
//! The only module of the crate that knows `sluice_proto`.

use sluice_positions::Tag;
use sluice_proto::v1 as pb;

use crate::def::DatasetDef;
use crate::error::DatasetError;
use crate::tensor::{DType, Element, Tensor};

impl From<DType> for pb::DType {
    fn from(d: DType) -> Self {
        match d {
            DType::Int64 => pb::DType::Int64,
            DType::Float32 => pb::DType::Float32,
            DType::Float64 => pb::DType::Float64,
            DType::String => pb::DType::String,
            DType::Bytes => pb::DType::Bytes,
            DType::Bool => pb::DType::Bool,
            DType::Uint8 => pb::DType::Uint8,
            DType::Int32 => pb::DType::Int32,
        }
    }
}

fn dtype_from_wire(v: i32) -> Result<DType, DatasetError> {
    Ok(match pb::DType::try_from(v) {
        Ok(pb::DType::Int64) => DType::Int64,
        Ok(pb::DType::Float32) => DType::Float32,
        Ok(pb::DType::Float64) => DType::Float64,
        Ok(pb::DType::String) => DType::String,
        Ok(pb::DType::Bytes) => DType::Bytes,
        Ok(pb::DType::Bool) => DType::Bool,
        Ok(pb::DType::Uint8) => DType::Uint8,
        Ok(pb::DType::Int32) => DType::Int32,
        _ => return Err(DatasetError::BadTensor(format!("unknown dtype {v}"))),
    })
}

impl From<Tensor> for pb::Tensor {
    fn from(t: Tensor) -> Self {
        pb::Tensor {
            dtype: pb::DType::from(t.dtype()) as i32,
            shape: t.shape().to_vec(),
            data: t.data().clone(),
        }
    }
}

impl TryFrom<pb::Tensor> for Tensor {
    type Error = DatasetError;
    fn try_from(t: pb::Tensor) -> Result<Self, DatasetError> {
        Tensor::new(dtype_from_wire(t.dtype)?, t.shape, t.data)
    }
}

impl From<Element> for pb::Element {
    fn from(e: Element) -> Self {
        let (mut element, origin) = e.into_pb_and_origin();
        element.origin = origin.as_ref().map(Tag::to_pb);
        element
    }
}

impl Element {
    /// The wire form without the origin, and the origin apart: a worker packs
    /// its messages' origins into their `Positions` columns
    /// (`sluice_positions::PositionColumns`), never per element.
    pub fn into_pb_and_origin(self) -> (pb::Element, Option<Tag>) {
        let names = self.names.as_deref().map(<[String]>::to_vec).unwrap_or_default();
        let element = pb::Element {
            components: self.components.into_iter().map(Into::into).collect(),
            names,
            origin: None,
        };
        (element, self.origin)
    }
}

impl TryFrom<pb::Element> for Element {
    type Error = DatasetError;
    fn try_from(e: pb::Element) -> Result<Self, DatasetError> {
        let components =
            e.components.into_iter().map(Tensor::try_from).collect::<Result<_, _>>()?;
        if e.names.is_empty() {
            return Ok(Element::new(components));
        }
        Element::named(e.names, components)
    }
}

impl From<&DatasetDef> for pb::DatasetDef {
    fn from(d: &DatasetDef) -> Self {
        pb::DatasetDef { json: d.to_json_compact() }
    }
}

impl TryFrom<pb::DatasetDef> for DatasetDef {
    type Error = DatasetError;
    /// Parses and validates the JSON form (`DatasetDef::from_json`).
    fn try_from(d: pb::DatasetDef) -> Result<Self, DatasetError> {
        DatasetDef::from_json(&d.json)
    }
}
