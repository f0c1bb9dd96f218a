//! Positions (exactly-once checkpoints, docs/exactly-once.md) as Python bytes:
//! `merge_positions` joins one checkpoint's positions of all consumers, and
//! `position_info` shows what a position is of, so the adapters can refuse a
//! position of another job before they read.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sluice_positions::{Position, PositionError};

use crate::errors;

/// Decodes a position's bytes (as `Reader.position()` returns them), or raises
/// `InvalidArgumentError` saying what is wrong with them.
pub fn decode(bytes: &[u8]) -> PyResult<Position> {
    Position::decode(bytes).map_err(|e| invalid(&e))
}

fn invalid(e: &PositionError) -> PyErr {
    errors::invalid_argument(format!("not a usable Sluice position: {e}"))
}

/// The union of the positions of one checkpoint (every consumer's, same job,
/// dataset, repetition and generation): the position that restores the job on
/// any number of consumers.
#[pyfunction]
pub fn merge_positions<'py>(
    py: Python<'py>,
    positions: Vec<Bound<'py, PyBytes>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let decoded = positions.iter().map(|b| decode(b.as_bytes())).collect::<PyResult<Vec<_>>>()?;
    let merged = Position::merge(&decoded).map_err(|e| match e {
        PositionError::Empty => errors::invalid_argument(
            "merge_positions needs at least one position (the consumers' positions of one \
             checkpoint)",
        ),
        e => errors::invalid_argument(e.to_string()),
    })?;
    Ok(PyBytes::new(py, &merged.encode()))
}

/// What a position is of: `job_name`, `dataset_id`, `repetition`,
/// `generation`, `merged_consumers`.
#[pyfunction]
pub fn position_info<'py>(py: Python<'py>, position: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let p = decode(position)?;
    let d = PyDict::new(py);
    d.set_item("job_name", p.job_name)?;
    d.set_item("dataset_id", p.dataset_id)?;
    d.set_item("repetition", p.repetition)?;
    d.set_item("generation", p.generation)?;
    d.set_item("merged_consumers", p.merged_consumers)?;
    Ok(d)
}
