//! Rows of a `from_tensor_slices` `tensors` source: element `i` straight from `i`.
//!
//! Built once per pipeline (`Plan::start`). A component of element `i` is a slice
//! of its tensor's payload (`Bytes::slice`, a reference-count bump, never a copy):
//! at `i * row_bytes` for a fixed-width dtype, at a precomputed offset for strings
//! and bytes, whose items have different lengths.

use std::sync::Arc;

use bytes::Bytes;

use crate::error::DatasetError;
use crate::tensor::{DType, Element, Tensor};

/// Where the rows of one tensor start in its payload.
enum Rows {
    /// Fixed-width dtype: every row has this many bytes.
    Fixed(usize),
    /// String/bytes: row `i` is `offsets[i]..offsets[i + 1]` (`rows + 1` offsets).
    Offsets(Vec<usize>),
}

struct Column {
    dtype: DType,
    /// The shape of one row: the tensor's shape without its first dimension.
    row_shape: Vec<u64>,
    data: Bytes,
    rows: Rows,
}

/// The source's tensors, ready to be sliced by row.
pub(super) struct Slicer {
    columns: Vec<Column>,
    /// Number of elements: the tensors' shared first dimension.
    rows: u64,
    names: Option<Arc<[String]>>,
}

impl Slicer {
    /// `tensors` must have passed `SliceValues::check` (rank ≥ 1, one first
    /// dimension); they are well formed by construction.
    pub(super) fn new(tensors: &[Tensor], names: Option<&[String]>) -> Result<Self, DatasetError> {
        let columns = tensors.iter().map(column).collect::<Result<_, _>>()?;
        let rows = tensors.first().and_then(|t| t.shape().first()).copied().unwrap_or(0);
        Ok(Slicer { columns, rows, names: names.map(Arc::from) })
    }

    /// Element `i`: row `i` of every tensor.
    pub(super) fn element(&self, i: usize) -> Result<Element, DatasetError> {
        let out_of_range = || DatasetError::Split(format!("source index {i} out of range"));
        if i as u64 >= self.rows {
            return Err(out_of_range());
        }
        let mut components = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            let range = match &c.rows {
                Rows::Fixed(width) => {
                    let start = i.checked_mul(*width).ok_or_else(out_of_range)?;
                    let end = start.checked_add(*width).ok_or_else(out_of_range)?;
                    if end > c.data.len() {
                        return Err(out_of_range());
                    }
                    start..end
                }
                Rows::Offsets(offsets) => match (offsets.get(i), offsets.get(i + 1)) {
                    (Some(start), Some(end)) => *start..*end,
                    _ => return Err(out_of_range()),
                },
            };
            components.push(Tensor::new(c.dtype, c.row_shape.clone(), c.data.slice(range))?);
        }
        Ok(Element { components, names: self.names.clone(), origin: None })
    }
}

fn column(t: &Tensor) -> Result<Column, DatasetError> {
    let Some((&rows, row_shape)) = t.shape().split_first() else {
        return Err(DatasetError::InvalidSpec {
            field: "stages[0].from_tensor_slices.tensors".into(),
            message: "a scalar tensor has no rows to slice".into(),
        });
    };
    let per_row: u64 = row_shape.iter().product();
    let too_large = || DatasetError::BadTensor("a row is larger than memory".into());
    let rows = match t.dtype().width() {
        Some(width) => Rows::Fixed(
            usize::try_from(per_row)
                .ok()
                .and_then(|n| n.checked_mul(width))
                .ok_or_else(too_large)?,
        ),
        // Rows without items are empty, however many there are.
        None if per_row == 0 => Rows::Fixed(0),
        None => {
            // Item `k` starts at `starts[k]`; row `i` spans items
            // `i * per_row .. (i + 1) * per_row`.
            let mut starts = Vec::new();
            let mut at = 0usize;
            for item in t.items()? {
                starts.push(at);
                at += 4 + item.len();
            }
            starts.push(at);
            // Well formed: `rows * per_row` items, so `rows` is at most the item count.
            let per_row = usize::try_from(per_row).map_err(|_| too_large())?;
            let offsets = (0..=rows as usize).map(|i| starts[i * per_row]).collect();
            Rows::Offsets(offsets)
        }
    };
    Ok(Column { dtype: t.dtype(), row_shape: row_shape.to_vec(), data: t.data().clone(), rows })
}
