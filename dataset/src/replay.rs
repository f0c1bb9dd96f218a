//! Whether a pipeline is *replayable*: whether a DYNAMIC job over it can deliver
//! exactly once (docs/exactly-once.md, "Replayable pipelines").
//!
//! A re-read unit must yield the same records, so that skipping its consumed
//! records yields exactly the others. The source and at most one expansion
//! (`flat_map` / `interleave` over a one-element-per-unit source) define the
//! records; every later stage only keeps, drops, joins or moves elements, and
//! each of those is tagged (`exec::tagging`). Stages that count elements
//! (`take`, `skip`, `enumerate`, `shard`), restart the source (`repeat`) or
//! read another pipeline (`zip`, `concatenate`) are not.

use sluice_positions::UnitRecords;

use crate::def::{DatasetDef, Stage};
use crate::python::PyOp;

impl DatasetDef {
    /// Whether a DYNAMIC job over this pipeline can deliver exactly once, and if
    /// so how many records its units have: `One` (each unit is one element) or
    /// `Counted` (file sources, or an expansion). `Err` names the first stage that
    /// is not replayable (`stages[i].op`) and what to change.
    pub fn exactly_once(&self) -> Result<UnitRecords, String> {
        let Some(source) = self.stages.first() else {
            return Err("the pipeline has no stages".into());
        };
        let mut units = match source {
            Stage::Range { .. } | Stage::FromTensorSlices(_) | Stage::ListFiles { .. } => {
                UnitRecords::One
            }
            Stage::TfRecord { .. }
            | Stage::TextLines { .. }
            | Stage::WebDataset { .. }
            | Stage::Parquet(_) => UnitRecords::Counted,
            other => {
                return Err(format!(
                    "stages[0].{}: not a source; a pipeline starts with one",
                    other.op_name()
                ))
            }
        };
        let file_source = source.is_file_source() && !matches!(source, Stage::ListFiles { .. });
        // A batch or shuffle seen: an expansion after it would not expand units.
        let mut mixed: Option<usize> = None;
        for (i, stage) in self.stages.iter().enumerate().skip(1) {
            let at = format!("stages[{i}].{}", stage.op_name());
            match stage {
                Stage::Map { .. }
                | Stage::Filter(_)
                | Stage::ParseExample { .. }
                | Stage::Prefetch { .. }
                | Stage::IgnoreErrors {} => {}
                Stage::Batch { .. } | Stage::Shuffle { .. } => {
                    mixed.get_or_insert(i);
                }
                Stage::Python(p) => match p.op {
                    PyOp::Map | PyOp::Filter => {}
                    PyOp::FlatMap => {
                        return Err(format!(
                            "{at}: a Python flat_map's outputs are not counted records of a \
                             unit; use a registry flat_map / interleave, or read this job \
                             at most once"
                        ))
                    }
                    PyOp::MapBatches => {
                        return Err(format!(
                            "{at}: map_batches may return another number of rows than it was \
                             given, so its rows cannot name their records; use a Python map, \
                             or read this job at most once"
                        ))
                    }
                },
                Stage::FlatMap(_) | Stage::Interleave { .. } => {
                    if file_source {
                        return Err(format!(
                            "{at}: expands the records of a file source, whose records are \
                             already counted (one expansion level only); expand a \
                             `list_files` source instead"
                        ));
                    }
                    if units == UnitRecords::Counted {
                        return Err(format!(
                            "{at}: a second flat_map / interleave (one expansion level only); \
                             merge the two dataset functions into one"
                        ));
                    }
                    if let Some(j) = mixed {
                        return Err(format!(
                            "{at}: comes after stages[{j}].{}, so its inputs are not whole \
                             source units; put the flat_map / interleave before it",
                            self.stages[j].op_name()
                        ));
                    }
                    units = UnitRecords::Counted;
                }
                Stage::Repeat { .. } => {
                    return Err(format!(
                        "{at}: not replayable; remove it and read several epochs with the \
                         reader's repetitions instead"
                    ))
                }
                Stage::Take { .. }
                | Stage::Skip { .. }
                | Stage::Enumerate { .. }
                | Stage::Shard { .. } => {
                    return Err(format!(
                        "{at}: counts the elements it sees, which differ when lost records \
                         are read again; remove it, or read this job at most once"
                    ))
                }
                Stage::Zip { .. } | Stage::Concatenate { .. } => {
                    return Err(format!(
                        "{at}: reads another pipeline, whose records are not split units; \
                         remove it, or read this job at most once"
                    ))
                }
                Stage::Range { .. }
                | Stage::FromTensorSlices(_)
                | Stage::ListFiles { .. }
                | Stage::TfRecord { .. }
                | Stage::TextLines { .. }
                | Stage::WebDataset { .. }
                | Stage::Parquet(_) => return Err(format!("{at}: a source after the first stage")),
            }
        }
        Ok(units)
    }

    /// Whether an exactly-once job over this pipeline can be read in a
    /// deterministic order (docs/exactly-once.md, "Deterministic order"): its
    /// elements must leave the worker in source order, so that a split's
    /// elements come out together and in the same order on every run. `Err`
    /// names the first stage that mixes splits or reorders elements, and what
    /// to change. Checked on top of [`DatasetDef::exactly_once`].
    pub fn deterministic_order(&self) -> Result<(), String> {
        for (i, stage) in self.stages.iter().enumerate().skip(1) {
            let at = format!("stages[{i}].{}", stage.op_name());
            let why = match stage {
                Stage::Batch { .. } | Stage::Shuffle { .. } => {
                    "mixes the elements of several splits; batch or shuffle in the training \
                     loop instead (the order is already seeded)"
                }
                Stage::Map { num_parallel_calls, deterministic: false, .. }
                    if *num_parallel_calls != 1 =>
                {
                    "a parallel map with deterministic=false hands out elements as they are \
                     ready; make it deterministic"
                }
                Stage::Python(p) if p.num_parallel_calls != 1 && !p.deterministic => {
                    "a parallel Python stage with deterministic=false hands out elements as \
                     they are ready; make it deterministic"
                }
                Stage::Interleave { cycle_length, .. } if *cycle_length > 1 => {
                    "an interleave with cycle_length > 1 mixes inputs of several splits; use \
                     cycle_length 1 (or flat_map)"
                }
                _ => continue,
            };
            return Err(format!("{at}: {why}"));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
