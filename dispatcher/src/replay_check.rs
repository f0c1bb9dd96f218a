//! STAND-IN for the dataset crate's `DatasetDef::exactly_once()` (issue 17,
//! written in `dataset/` by another part at the same time): whether a pipeline
//! can be replayed unit by unit, and how many records a unit has. Same
//! signature, so the lead replaces calls to [`exactly_once`] with
//! `def.exactly_once()` and deletes this file.
//!
//! Deliberately narrow: a DYNAMIC-splittable source (`range`,
//! `from_tensor_slices`, `list_files`: one record per unit; `tfrecord`,
//! `text_lines`: counted records per file) followed only by stages that keep,
//! join, move or drop elements without making new ones of one input (`map`,
//! `filter`, `shuffle`, `batch`, `prefetch`, `parse_example`). Everything else
//! is refused, naming the stage.

use sluice_dataset::{DatasetDef, Stage};
use sluice_positions::UnitRecords;

pub fn exactly_once(def: &DatasetDef) -> Result<UnitRecords, String> {
    let Some(source) = def.stages.first() else {
        return Err("the pipeline has no source".into());
    };
    let rule = match source {
        Stage::Range { .. } | Stage::FromTensorSlices(_) | Stage::ListFiles { .. } => {
            UnitRecords::One
        }
        Stage::TfRecord { .. } | Stage::TextLines { .. } => UnitRecords::Counted,
        other => {
            return Err(format!(
                "stages[0].{} is not a source that dynamic sharding divides into units",
                other.op_name()
            ))
        }
    };
    for (i, stage) in def.stages.iter().enumerate().skip(1) {
        match stage {
            Stage::Map { .. }
            | Stage::Filter(_)
            | Stage::Shuffle { .. }
            | Stage::Batch { .. }
            | Stage::Prefetch { .. }
            | Stage::ParseExample { .. } => {}
            other => {
                return Err(format!(
                    "stages[{i}].{} cannot be replayed unit by unit (exactly-once pipelines \
                     are a source followed by map, filter, shuffle, batch, prefetch or \
                     parse_example; epochs are the reader's repetition, not `repeat`)",
                    other.op_name()
                ))
            }
        }
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_and_file_sources_with_plain_stages_are_replayable() {
        let def = DatasetDef::range(10).map("square").batch(2, false);
        assert_eq!(exactly_once(&def), Ok(UnitRecords::One));
        let def = DatasetDef { stages: vec![Stage::TextLines { files: vec!["a".into()] }] };
        assert_eq!(exactly_once(&def), Ok(UnitRecords::Counted));
    }

    #[test]
    fn repeat_and_take_are_refused_naming_the_stage() {
        let err = exactly_once(&DatasetDef::range(10).repeat(2)).unwrap_err();
        assert!(err.contains("stages[1].repeat"), "{err}");
        let err = exactly_once(&DatasetDef::range(10).map("square").take(3)).unwrap_err();
        assert!(err.contains("stages[2].take"), "{err}");
    }
}
