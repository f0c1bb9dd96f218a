//! Conversions between this crate's domain types and the protobuf wire types.
//! The only module of the crate that knows `sluice_proto`.

use sluice_proto::v1 as pb;

use crate::def::{Arg, DatasetDef, FnCall, SliceValues, Stage};
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
        pb::Element { components: e.components.into_iter().map(Into::into).collect() }
    }
}

impl TryFrom<pb::Element> for Element {
    type Error = DatasetError;
    fn try_from(e: pb::Element) -> Result<Self, DatasetError> {
        let components =
            e.components.into_iter().map(Tensor::try_from).collect::<Result<_, _>>()?;
        Ok(Element { components })
    }
}

fn arg_to_wire(a: &Arg) -> pb::Arg {
    let value = match a {
        Arg::Int(i) => pb::arg::Value::Int(*i),
        Arg::Float(f) => pb::arg::Value::Float(*f),
        Arg::Str(s) => pb::arg::Value::Str(s.clone()),
    };
    pb::Arg { value: Some(value) }
}

fn call_to_wire(f: &FnCall) -> pb::FnCall {
    pb::FnCall { name: f.name.clone(), args: f.args.iter().map(arg_to_wire).collect() }
}

fn call_from_wire(f: pb::FnCall, field: &str) -> Result<FnCall, DatasetError> {
    let args = f
        .args
        .into_iter()
        .enumerate()
        .map(|(j, a)| match a.value {
            Some(pb::arg::Value::Int(i)) => Ok(Arg::Int(i)),
            Some(pb::arg::Value::Float(x)) => Ok(Arg::Float(x)),
            Some(pb::arg::Value::Str(s)) => Ok(Arg::Str(s)),
            None => Err(DatasetError::InvalidSpec {
                field: format!("{field}.args[{j}]"),
                message: "argument has no value".into(),
            }),
        })
        .collect::<Result<_, _>>()?;
    Ok(FnCall { name: f.name, args })
}

impl From<&DatasetDef> for pb::DatasetDef {
    fn from(d: &DatasetDef) -> Self {
        use pb::stage::Op;
        let stages = d
            .stages
            .iter()
            .map(|s| {
                let op = match s {
                    Stage::Range { start, stop, step } => {
                        Op::Range(pb::RangeOp { start: *start, stop: *stop, step: *step })
                    }
                    Stage::FromTensorSlices(v) => {
                        use pb::from_tensor_slices_op::Values;
                        let values = match v {
                            SliceValues::Ints(v) => {
                                Values::Ints(pb::Int64List { values: v.clone() })
                            }
                            SliceValues::Floats(v) => {
                                Values::Floats(pb::FloatList { values: v.clone() })
                            }
                            SliceValues::Strings(v) => {
                                Values::Strings(pb::StringList { values: v.clone() })
                            }
                            SliceValues::Bytes(v) => Values::Bytes(pb::BytesList {
                                values: v.iter().map(|b| b.clone().into()).collect(),
                            }),
                        };
                        Op::FromTensorSlices(pb::FromTensorSlicesOp { values: Some(values) })
                    }
                    Stage::Map(f) => Op::Map(call_to_wire(f)),
                    Stage::Filter(f) => Op::Filter(call_to_wire(f)),
                    Stage::Batch { size, drop_remainder } => {
                        Op::Batch(pb::BatchOp { size: *size, drop_remainder: *drop_remainder })
                    }
                    Stage::Shuffle { buffer_size, seed } => {
                        Op::Shuffle(pb::ShuffleOp { buffer_size: *buffer_size, seed: *seed })
                    }
                    Stage::Repeat { count } => Op::Repeat(pb::RepeatOp { count: *count }),
                    Stage::Take { count } => Op::Take(pb::CountOp { count: *count }),
                    Stage::Skip { count } => Op::Skip(pb::CountOp { count: *count }),
                    Stage::Prefetch { buffer_size } => {
                        Op::Prefetch(pb::PrefetchOp { buffer_size: *buffer_size })
                    }
                };
                pb::Stage { op: Some(op) }
            })
            .collect();
        pb::DatasetDef { stages }
    }
}

impl TryFrom<pb::DatasetDef> for DatasetDef {
    type Error = DatasetError;
    /// Converts and validates the structure (`DatasetDef::validate`).
    fn try_from(d: pb::DatasetDef) -> Result<Self, DatasetError> {
        use pb::stage::Op;
        let mut stages = Vec::with_capacity(d.stages.len());
        for (i, s) in d.stages.into_iter().enumerate() {
            let field = format!("stages[{i}]");
            let op = s.op.ok_or_else(|| DatasetError::InvalidSpec {
                field: field.clone(),
                message: "stage has no op".into(),
            })?;
            let stage = match op {
                Op::Range(r) => Stage::Range { start: r.start, stop: r.stop, step: r.step },
                Op::FromTensorSlices(v) => {
                    use pb::from_tensor_slices_op::Values;
                    let values = match v.values {
                        Some(Values::Ints(l)) => SliceValues::Ints(l.values),
                        Some(Values::Floats(l)) => SliceValues::Floats(l.values),
                        Some(Values::Strings(l)) => SliceValues::Strings(l.values),
                        Some(Values::Bytes(l)) => {
                            SliceValues::Bytes(l.values.into_iter().map(|b| b.to_vec()).collect())
                        }
                        None => {
                            return Err(DatasetError::InvalidSpec {
                                field: format!("{field}.from_tensor_slices"),
                                message: "no values".into(),
                            })
                        }
                    };
                    Stage::FromTensorSlices(values)
                }
                Op::Map(f) => Stage::Map(call_from_wire(f, &format!("{field}.map"))?),
                Op::Filter(f) => Stage::Filter(call_from_wire(f, &format!("{field}.filter"))?),
                Op::Batch(b) => Stage::Batch { size: b.size, drop_remainder: b.drop_remainder },
                Op::Shuffle(s) => Stage::Shuffle { buffer_size: s.buffer_size, seed: s.seed },
                Op::Repeat(r) => Stage::Repeat { count: r.count },
                Op::Take(c) => Stage::Take { count: c.count },
                Op::Skip(c) => Stage::Skip { count: c.count },
                Op::Prefetch(p) => Stage::Prefetch { buffer_size: p.buffer_size },
            };
            stages.push(stage);
        }
        let def = DatasetDef { stages };
        def.validate()?;
        Ok(def)
    }
}
