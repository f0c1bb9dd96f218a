//! Helpers shared by the dataset crate's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use sluice_dataset::{DatasetDef, DatasetError, Element, FunctionRegistry};

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
