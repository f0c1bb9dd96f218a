//! From Arrow columns to tensors: which columns of a file become which
//! components ([`Leaves::plan`]), and the values of a range of rows of one
//! column as a tensor ([`Leaf::take`]).
//!
//! The file's schema is read as Parquet types map to Arrow without the Arrow
//! schema a writer may have stored beside it (`skip_arrow_metadata`), so a
//! column arrives as one of few types: booleans, 8- to 64-bit integers, 32- and
//! 64-bit floats, UTF-8 strings, binary (fixed-length too), lists of those,
//! and structs of all of these. A struct's fields become components named
//! `column.field` (recursively), so Hugging Face's image columns
//! (`struct<bytes, path>`) arrive as `image.bytes` and `image.path`.
//!
//! | Parquet / Arrow | component |
//! |---|---|
//! | boolean | `bool` |
//! | int8, int16, int32, uint16 | `int32` |
//! | uint8 | `uint8` |
//! | int64, uint32, uint64 (values ≥ 2⁶³ are an error) | `int64` |
//! | float32 (float16) | `float32` |
//! | float64 | `float64` |
//! | string | `string` |
//! | binary, fixed-length binary | `bytes` |
//! | list of one of the above | a 1-D tensor of it |
//!
//! Anything else (dates, timestamps, decimals, maps, lists of lists or of
//! structs) is refused at registration, naming the column and its type.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use crate::def::Arg;
use crate::tensor::{DType, Tensor};

/// How one component's values are laid out in its column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// One value per row.
    Scalar,
    /// A list of values per row (a 1-D tensor; its length may vary).
    List,
}

/// One component: a leaf column of the file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Leaf {
    /// The component's name (`column`, or `column.field` inside a struct).
    pub name: String,
    /// The top-level column it lies in.
    root: String,
    /// Child indices through structs below the top-level column.
    path: Vec<usize>,
    pub dtype: DType,
    layout: Layout,
    /// What a null becomes (scalar columns with a `defaults` entry).
    default: Option<Arg>,
}

/// A value at a row could not become part of a tensor: a null, an unsigned
/// value over int64, lists of unequal lengths in one batch.
#[derive(Debug)]
pub(crate) struct RowFault {
    /// The row within the batch.
    pub row: usize,
    pub message: String,
}

/// The components of a file's rows, in order.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Leaves {
    pub leaves: Vec<Leaf>,
    /// The top-level columns read (the projection).
    pub roots: Vec<String>,
    pub names: Arc<[String]>,
}

fn dtype_of(t: &DataType) -> Option<DType> {
    Some(match t {
        DataType::Boolean => DType::Bool,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt16 => DType::Int32,
        DataType::UInt8 => DType::Uint8,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => DType::Int64,
        DataType::Float16 | DataType::Float32 => DType::Float32,
        DataType::Float64 => DType::Float64,
        DataType::Utf8 | DataType::LargeUtf8 => DType::String,
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_) => DType::Bytes,
        _ => return None,
    })
}

impl Leaves {
    /// The components of `schema`'s `columns` (all of them when empty), with
    /// `defaults` by component name. `Err` says which column is missing or of an
    /// unsupported type, or which default does not fit.
    pub fn plan(
        schema: &Schema,
        columns: &[String],
        defaults: &std::collections::BTreeMap<String, Arg>,
    ) -> Result<Leaves, String> {
        let roots: Vec<String> = if columns.is_empty() {
            schema.fields().iter().map(|f| f.name().clone()).collect()
        } else {
            columns.to_vec()
        };
        let mut leaves = Vec::new();
        for root in &roots {
            let field = schema.field_with_name(root).map_err(|_| {
                let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                format!("no column `{root}`; the file's columns are: {}", have.join(", "))
            })?;
            walk(field, root, root.clone(), Vec::new(), &mut leaves)?;
        }
        for (name, value) in defaults {
            let leaf = leaves.iter_mut().find(|l| &l.name == name).ok_or_else(|| {
                format!("`defaults` names `{name}`, which is not a component read")
            })?;
            if leaf.layout != Layout::Scalar {
                return Err(format!(
                    "`defaults.{name}`: a default fills nulls of a scalar column, and `{name}` \
                     holds lists"
                ));
            }
            check_default(leaf.dtype, value).map_err(|m| format!("`defaults.{name}`: {m}"))?;
            leaf.default = Some(value.clone());
        }
        let names: Arc<[String]> = leaves.iter().map(|l| l.name.clone()).collect();
        Ok(Leaves { leaves, roots, names })
    }

    /// The leaf columns of `batch`, in component order (found once per batch).
    pub fn columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, String> {
        self.leaves
            .iter()
            .map(|leaf| {
                let mut col = batch
                    .column_by_name(&leaf.root)
                    .ok_or_else(|| format!("column `{}` missing from a batch", leaf.root))?;
                for &i in &leaf.path {
                    col = col.as_struct_opt().map(|s| s.column(i)).ok_or_else(|| {
                        format!("column `{}` is not the struct the footer said", leaf.root)
                    })?;
                }
                Ok(col.clone())
            })
            .collect()
    }
}

fn walk(
    field: &Field,
    root: &str,
    name: String,
    path: Vec<usize>,
    out: &mut Vec<Leaf>,
) -> Result<(), String> {
    let unsupported = |t: &DataType| {
        format!(
            "column `{name}` has type {t}, which Sluice cannot make a tensor of (supported: \
             booleans, integers, floats, strings, binary, lists of these, structs of all of \
             these); leave it out with `columns`"
        )
    };
    let leaf = |dtype, layout| Leaf {
        name: name.clone(),
        root: root.to_string(),
        path: path.clone(),
        dtype,
        layout,
        default: None,
    };
    match field.data_type() {
        DataType::Struct(fields) => {
            for (i, child) in fields.iter().enumerate() {
                let mut p = path.clone();
                p.push(i);
                walk(child, root, format!("{name}.{}", child.name()), p, out)?;
            }
        }
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            let dtype = dtype_of(item.data_type()).ok_or_else(|| unsupported(field.data_type()))?;
            out.push(leaf(dtype, Layout::List));
        }
        t => out.push(leaf(dtype_of(t).ok_or_else(|| unsupported(t))?, Layout::Scalar)),
    }
    Ok(())
}

fn check_default(dtype: DType, value: &Arg) -> Result<(), String> {
    match (dtype, value) {
        (DType::String | DType::Bytes, Arg::Str(_)) => Ok(()),
        (DType::Float32 | DType::Float64, Arg::Int(_) | Arg::Float(_)) => Ok(()),
        (DType::Bool, Arg::Int(0 | 1)) => Ok(()),
        (DType::Int32, Arg::Int(v)) if i32::try_from(*v).is_ok() => Ok(()),
        (DType::Uint8, Arg::Int(v)) if u8::try_from(*v).is_ok() => Ok(()),
        (DType::Int64, Arg::Int(_)) => Ok(()),
        (d, v) => Err(format!("{v:?} is not a value of the column's type {}", d.name())),
    }
}

/// Values of one leaf gathered before they become a tensor.
enum Out {
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Items(DType, Vec<Vec<u8>>),
}

impl Leaf {
    /// Rows `rows` of this leaf's column `col` as one tensor: a scalar for one
    /// row (`batched` false), else with a leading dimension of the rows (a
    /// list column's lists must then have one length).
    pub fn take(
        &self,
        col: &dyn Array,
        rows: Range<usize>,
        batched: bool,
    ) -> Result<Tensor, RowFault> {
        let (values, shape) = match self.layout {
            Layout::Scalar => {
                let shape = if batched { vec![rows.len() as u64] } else { vec![] };
                (self.values(col, rows.clone())?, shape)
            }
            Layout::List => {
                let (items, lengths) = list_values(col, rows.clone(), &self.name)?;
                let values = self
                    .values(items.as_ref(), items_range(&lengths))
                    .map_err(|f| RowFault { row: rows.start, message: f.message })?;
                let shape = if batched {
                    let first = lengths.first().map_or(0, |l| l.len());
                    if let Some(i) = lengths.iter().position(|l| l.len() != first) {
                        return Err(RowFault {
                            row: rows.start + i,
                            message: format!(
                                "the lists of `{}` in one batch have different lengths ({first} \
                                 and {}); read it row by row (no `batch_rows`) and pad",
                                self.name,
                                lengths[i].len()
                            ),
                        });
                    }
                    vec![rows.len() as u64, first as u64]
                } else {
                    vec![lengths.first().map_or(0, |l| l.len() as u64)]
                };
                (values, shape)
            }
        };
        let made = match values {
            Out::I32(v) => Tensor::from_i32s(shape, &v),
            Out::I64(v) => Tensor::from_i64s(shape, &v),
            Out::U8(v) => Tensor::from_u8s(shape, v),
            Out::F32(v) => Tensor::from_f32s(shape, &v),
            Out::F64(v) => Tensor::from_f64s(shape, &v),
            Out::Bool(v) => Tensor::from_bools(shape, &v),
            Out::Items(dtype, v) => Tensor::from_items(dtype, shape, &v),
        };
        made.map_err(|e| RowFault { row: rows.start, message: e.to_string() })
    }

    /// The values at `rows` of a leaf array, nulls replaced by the default.
    fn values(&self, a: &dyn Array, rows: Range<usize>) -> Result<Out, RowFault> {
        let null = |i: usize| -> Result<Arg, RowFault> {
            self.default.clone().ok_or_else(|| RowFault {
                row: i,
                message: format!(
                    "`{}` is null; give it a default (`defaults`), or skip such rows with \
                     ignore_errors",
                    self.name
                ),
            })
        };
        macro_rules! gather {
            ($arr:expr, $out:ident, |$v:ident| $conv:expr, |$d:ident| $def:expr) => {{
                let arr = $arr;
                let mut out = Vec::with_capacity(rows.len());
                for i in rows.clone() {
                    if arr.is_null(i) {
                        let $d = null(i)?;
                        out.push($def);
                    } else {
                        let $v = arr.value(i);
                        out.push($conv);
                    }
                }
                Out::$out(out)
            }};
        }
        let int = |a: Arg| match a {
            Arg::Int(v) => v,
            _ => 0,
        };
        let float = |a: Arg| match a {
            Arg::Int(v) => v as f64,
            Arg::Float(v) => v,
            Arg::Str(_) => 0.0,
        };
        let item = |a: Arg| match a {
            Arg::Str(s) => s.into_bytes(),
            _ => Vec::new(),
        };
        Ok(match a.data_type() {
            DataType::Boolean => gather!(a.as_boolean(), Bool, |v| v, |d| int(d) != 0),
            DataType::Int8 => {
                gather!(a.as_primitive::<Int8Type>(), I32, |v| v.into(), |d| int(d) as i32)
            }
            DataType::Int16 => {
                gather!(a.as_primitive::<Int16Type>(), I32, |v| v.into(), |d| int(d) as i32)
            }
            DataType::Int32 => {
                gather!(a.as_primitive::<Int32Type>(), I32, |v| v, |d| int(d) as i32)
            }
            DataType::UInt16 => {
                gather!(a.as_primitive::<UInt16Type>(), I32, |v| v.into(), |d| int(d) as i32)
            }
            DataType::UInt8 => gather!(a.as_primitive::<UInt8Type>(), U8, |v| v, |d| int(d) as u8),
            DataType::Int64 => gather!(a.as_primitive::<Int64Type>(), I64, |v| v, |d| int(d)),
            DataType::UInt32 => {
                gather!(a.as_primitive::<UInt32Type>(), I64, |v| v.into(), |d| int(d))
            }
            DataType::UInt64 => {
                let arr = a.as_primitive::<UInt64Type>();
                let mut out = Vec::with_capacity(rows.len());
                for i in rows.clone() {
                    if arr.is_null(i) {
                        out.push(int(null(i)?));
                    } else {
                        out.push(i64::try_from(arr.value(i)).map_err(|_| RowFault {
                            row: i,
                            message: format!(
                                "`{}` holds {}, over int64 (the widest integer tensor)",
                                self.name,
                                arr.value(i)
                            ),
                        })?);
                    }
                }
                Out::I64(out)
            }
            DataType::Float16 => {
                gather!(a.as_primitive::<Float16Type>(), F32, |v| v.to_f32(), |d| float(d) as f32)
            }
            DataType::Float32 => {
                gather!(a.as_primitive::<Float32Type>(), F32, |v| v, |d| float(d) as f32)
            }
            DataType::Float64 => gather!(a.as_primitive::<Float64Type>(), F64, |v| v, |d| float(d)),
            _ => self.items(a, rows, self.dtype, &null, &item)?,
        })
    }

    /// String and binary values (every variable-length type).
    fn items<'a>(
        &self,
        a: &'a dyn Array,
        rows: Range<usize>,
        dtype: DType,
        null: &dyn Fn(usize) -> Result<Arg, RowFault>,
        item: &dyn Fn(Arg) -> Vec<u8>,
    ) -> Result<Out, RowFault> {
        let value: Box<dyn Fn(usize) -> &'a [u8] + 'a> = match a.data_type() {
            DataType::Utf8 => Box::new(|i| a.as_string::<i32>().value(i).as_bytes()),
            DataType::LargeUtf8 => Box::new(|i| a.as_string::<i64>().value(i).as_bytes()),
            DataType::Binary => Box::new(|i| a.as_binary::<i32>().value(i)),
            DataType::LargeBinary => Box::new(|i| a.as_binary::<i64>().value(i)),
            DataType::FixedSizeBinary(_) => Box::new(|i| a.as_fixed_size_binary().value(i)),
            t => {
                return Err(RowFault {
                    row: rows.start,
                    message: format!("`{}` has type {t}, which the footer did not say", self.name),
                })
            }
        };
        let mut out = Vec::with_capacity(rows.len());
        for i in rows {
            out.push(if a.is_null(i) { item(null(i)?) } else { value(i).to_vec() });
        }
        Ok(Out::Items(dtype, out))
    }
}

/// The item array of a list column and the item ranges of `rows`.
fn list_values(
    col: &dyn Array,
    rows: Range<usize>,
    name: &str,
) -> Result<(ArrayRef, Vec<Range<usize>>), RowFault> {
    let null = |i| RowFault {
        row: i,
        message: format!(
            "`{name}` is null (a list column has no default); skip such rows with ignore_errors"
        ),
    };
    let mut ranges = Vec::with_capacity(rows.len());
    let items = match col.data_type() {
        DataType::List(_) => {
            let l = col.as_list::<i32>();
            for i in rows.clone() {
                let o = l.value_offsets();
                ranges.push(o[i] as usize..o[i + 1] as usize);
            }
            l.values().clone()
        }
        DataType::LargeList(_) => {
            let l = col.as_list::<i64>();
            for i in rows.clone() {
                let o = l.value_offsets();
                ranges.push(o[i] as usize..o[i + 1] as usize);
            }
            l.values().clone()
        }
        DataType::FixedSizeList(_, k) => {
            let l = col.as_fixed_size_list();
            let k = *k as usize;
            for i in rows.clone() {
                let at = l.value_offset_at(i);
                ranges.push(at..at + k);
            }
            l.values().clone()
        }
        t => {
            return Err(RowFault {
                row: rows.start,
                message: format!("`{name}` has type {t}, not the list the footer said"),
            })
        }
    };
    if let Some(i) = rows.clone().find(|&i| col.is_null(i)) {
        return Err(null(i));
    }
    Ok((items, ranges))
}

/// The items of consecutive rows' lists: one contiguous range of the item array.
fn items_range(lengths: &[Range<usize>]) -> Range<usize> {
    match (lengths.first(), lengths.last()) {
        (Some(a), Some(b)) => a.start..b.end,
        _ => 0..0,
    }
}
