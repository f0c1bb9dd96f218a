//! The source stage: `range`, `from_tensor_slices` and the file sources
//! (`list_files`, `tfrecord`, `text_lines`, `webdataset`, `parquet`).
//!
//! Source unit `i` is found straight from its index, which is what makes dynamic
//! sharding possible: a split is just a range of indices, and the worker that
//! receives `[begin, end)` produces exactly those units without touching the
//! others. For `range`/`from_tensor_slices` a unit is one element (for the
//! `tensors` form, row `i` of every tensor: see `slices`); for a file
//! source it is one file (its name for `list_files`, all its records or lines
//! otherwise), opened only when the source reaches it, one at a time; for
//! `parquet` one row group (`formats::parquet`).

use std::sync::Arc;

use sluice_positions::Tag;

use super::files::{self, FileFormat};
use super::plan::Plan;
use super::stream::{lock, ElementIter, SplitRange};
use super::tagging::Tags;
use crate::def::{range_len, SliceValues, Stage};
use crate::error::DatasetError;
use crate::tensor::{Element, Tensor};

/// Number of elements a source stage produces per epoch (0 for a non-source).
pub(super) fn cardinality(stage: &Stage) -> u64 {
    match stage {
        Stage::Range { start, stop, step } => range_len(*start, *stop, *step),
        Stage::FromTensorSlices(v) => v.len() as u64,
        Stage::ListFiles { files, .. } => files.as_ref().map_or(0, |f| f.len() as u64),
        Stage::TfRecord { files, .. }
        | Stage::TextLines { files }
        | Stage::WebDataset { files } => files.len() as u64,
        Stage::Parquet(p) => p.units(),
        _ => 0,
    }
}

/// Source element `i` of the plan's first stage; `i` must be below the
/// cardinality. A bytes or tensors `from_tensor_slices` source reads the values the
/// plan prepared once per pipeline.
fn element_at(plan: &Plan, stage: &Stage, i: u64) -> Result<Element, DatasetError> {
    let out_of_range = || DatasetError::Split(format!("source index {i} out of range"));
    let idx = usize::try_from(i).map_err(|_| out_of_range())?;
    if let Some(built) = &plan.byte_slices {
        return Ok(Element::single(built.get(idx).ok_or_else(out_of_range)?.clone()));
    }
    if let Some(slicer) = &plan.tensor_slices {
        return slicer.element(idx);
    }
    let t = match stage {
        Stage::Range { start, step, .. } => {
            let v = i128::from(*start) + i128::from(i) * i128::from(*step);
            Tensor::scalar_i64(i64::try_from(v).map_err(|_| out_of_range())?)
        }
        Stage::FromTensorSlices(values) => match values {
            SliceValues::Ints(v) => Tensor::scalar_i64(*v.get(idx).ok_or_else(out_of_range)?),
            SliceValues::Floats(v) => Tensor::scalar_f32(*v.get(idx).ok_or_else(out_of_range)?),
            SliceValues::Strings(v) => Tensor::scalar_str(v.get(idx).ok_or_else(out_of_range)?),
            SliceValues::Bytes(v) => Tensor::scalar_bytes(v.get(idx).ok_or_else(out_of_range)?),
            SliceValues::Tensors { .. } => {
                return Err(DatasetError::Unsupported(
                    "a tensors source read without its prepared rows (Plan::start makes them)"
                        .into(),
                ))
            }
        },
        Stage::ListFiles { files: Some(files), .. } => {
            Tensor::scalar_str(files.get(idx).ok_or_else(out_of_range)?)
        }
        Stage::ListFiles { pattern, files: None, .. } => {
            return Err(DatasetError::Unsupported(format!(
                "list_files `{pattern}` is not resolved (the dispatcher resolves it at \
                 registration; call DatasetDef::resolve_files first)"
            )))
        }
        other => {
            return Err(DatasetError::Unsupported(format!(
                "`{}` is not a source stage",
                other.op_name()
            )))
        }
    };
    Ok(Element::single(t))
}

/// The elements of file unit `i` of a `tfrecord` / `text_lines` source, or `None`
/// for a source whose unit is one element.
fn file_unit(plan: &Plan, stage: &Stage, i: u64) -> Option<Result<ElementIter, DatasetError>> {
    let (files, format) = match stage {
        Stage::TfRecord { files, skip_corrupt } => {
            (files, FileFormat::TfRecord { skip_corrupt: *skip_corrupt })
        }
        Stage::TextLines { files } => (files, FileFormat::TextLines),
        Stage::WebDataset { files } => (files, FileFormat::WebDataset),
        Stage::Parquet(_) => {
            return plan.parquet.as_ref().map(|reader| reader.unit(i));
        }
        _ => return None,
    };
    let file = usize::try_from(i).ok().and_then(|i| files.get(i));
    Some(match file {
        Some(f) => Ok(files::elements(f.clone(), format, plan.registry.data_roots().clone())),
        None => Err(DatasetError::Split(format!("source file index {i} out of range"))),
    })
}

/// Tagged: unit `i` as one element, `None` if its record was consumed. Before an
/// expansion the origin names the unit, and the expansion numbers its records.
fn tag_unit(
    tags: &Tags,
    i: u64,
    element: Result<Element, DatasetError>,
) -> Option<Result<Element, DatasetError>> {
    if tags.expansion.is_none() && tags.skips.contains(i, 0) {
        return None;
    }
    Some(element.map(|mut e| {
        e.origin = Some(Tag::record(i, 0));
        e
    }))
}

/// Produces source elements: all of `[0, cardinality)` locally, or the ranges
/// handed out by the plan's split provider.
pub(super) struct Source {
    plan: Arc<Plan>,
    cardinality: u64,
    next: u64,
    end: u64,
    /// In split mode: whether the provider said this epoch has no more splits.
    exhausted: bool,
    /// The file being read (file sources only).
    current: Option<ElementIter>,
    /// Tagged: (unit, records read so far) of `current`.
    records: (u64, u64),
    tags: Option<Arc<Tags>>,
}

impl Source {
    pub(super) fn new(plan: Arc<Plan>) -> Self {
        let cardinality = plan.source_cardinality();
        let end = if plan.splits.is_some() { 0 } else { cardinality };
        let tags = plan.tags.clone();
        Source {
            plan,
            cardinality,
            next: 0,
            end,
            exhausted: false,
            current: None,
            records: (0, 0),
            tags,
        }
    }

    /// Tagged: the next record of the file being read, skipping consumed ones;
    /// `None` at the end of the file, whose record count goes to the sink.
    fn next_record(&mut self, tags: &Tags) -> Option<Result<Element, DatasetError>> {
        let file = self.current.as_mut()?;
        loop {
            let (unit, record) = self.records;
            let Some(item) = file.next() else {
                tags.dropped_at(0).end(unit, record);
                self.current = None;
                return None;
            };
            self.records.1 += 1;
            match item {
                Ok(_) if tags.skips.contains(unit, record) => {}
                Ok(mut e) => {
                    e.origin = Some(Tag::record(unit, record));
                    return Some(Ok(e));
                }
                // A bad record of an intact file (an element error): consumed
                // already, or consumed with the next element if `ignore_errors`
                // skips it.
                Err(e) if e.is_element_error() => {
                    if !tags.skips.contains(unit, record) {
                        tags.dropped_at(0).drop_origin(Some(Tag::record(unit, record)));
                        return Some(Err(e));
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Fetches the next split; `Ok(false)` at the end of the epoch.
    fn next_split(&mut self) -> Result<bool, DatasetError> {
        let Some(splits) = &self.plan.splits else {
            return Ok(false);
        };
        let (split, skips) = {
            let mut provider = lock(splits);
            let split = provider.next_split()?;
            let skips = match (&self.tags, split) {
                (Some(_), Some(_)) => provider.take_skip_runs(),
                _ => Vec::new(),
            };
            (split, skips)
        };
        match split {
            None => Ok(false),
            Some(SplitRange { begin, end }) if begin > end || end > self.cardinality => {
                Err(DatasetError::Split(format!(
                    "split [{begin}, {end}) is not within the source's [0, {})",
                    self.cardinality
                )))
            }
            Some(SplitRange { begin, end }) => {
                tracing::trace!(begin, end, "source split");
                if let Some(tags) = &self.tags {
                    tags.skip(skips);
                }
                self.next = begin;
                self.end = end;
                Ok(true)
            }
        }
    }
}

impl Iterator for Source {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.current.is_some() {
                match self.tags.clone() {
                    Some(tags) => {
                        if let Some(item) = self.next_record(&tags) {
                            return Some(item);
                        }
                    }
                    None => match self.current.as_mut().and_then(Iterator::next) {
                        Some(item) => return Some(item),
                        None => self.current = None,
                    },
                }
            }
            while self.next >= self.end {
                if self.exhausted {
                    return None;
                }
                match self.next_split() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.exhausted = true;
                        return None;
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
            let i = self.next;
            self.next += 1;
            let stage = self.plan.stages.first()?;
            match file_unit(&self.plan, stage, i) {
                None => {
                    let element = element_at(&self.plan, stage, i);
                    match &self.tags {
                        None => return Some(element),
                        Some(tags) => {
                            if let Some(item) = tag_unit(tags, i, element) {
                                return Some(item);
                            }
                        }
                    }
                }
                Some(Ok(file)) => {
                    self.current = Some(file);
                    self.records = (i, 0);
                }
                Some(Err(e)) => return Some(Err(e)),
            }
        }
    }
}
