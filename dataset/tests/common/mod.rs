//! Helpers shared by the dataset crate's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use sluice_dataset::{
    DatasetDef, DatasetError, Element, FunctionRegistry, SplitProvider, SplitRange,
};
use sluice_positions::Run;

/// Runs `def` locally with the built-in registry and collects every item.
pub fn run(def: &DatasetDef) -> Vec<Result<Element, DatasetError>> {
    run_with(def, &FunctionRegistry::builtin())
}

pub fn run_with(
    def: &DatasetDef,
    registry: &FunctionRegistry,
) -> Vec<Result<Element, DatasetError>> {
    def.iter_local(registry).expect("the pipeline passes its checks").collect()
}

/// Runs `def` locally and returns the int64 scalar of every element.
pub fn ints(def: &DatasetDef) -> Vec<i64> {
    run(def)
        .into_iter()
        .map(|r| r.expect("no element fails").as_i64().expect("an int64 scalar element"))
        .collect()
}

/// Runs `def` locally and returns every element as JSON.
pub fn json(def: &DatasetDef) -> Vec<serde_json::Value> {
    run(def).into_iter().map(|r| r.expect("no element fails").to_json()).collect()
}

/// Hands out fixed splits, each with the skip runs a restored split carries, once.
pub struct Splits(pub Vec<(u64, u64, Vec<Run>)>, pub Vec<Run>);

impl SplitProvider for Splits {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let (begin, end, skips) = self.0.remove(0);
        self.1 = skips;
        Ok(Some(SplitRange { begin, end }))
    }
    fn reset(&mut self) -> Result<(), DatasetError> {
        Ok(())
    }
    fn take_skip_runs(&mut self) -> Vec<Run> {
        std::mem::take(&mut self.1)
    }
}
