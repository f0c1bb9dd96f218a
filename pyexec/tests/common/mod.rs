//! Fixtures for the pool's tests: a pool of real Python processes (the test
//! venv's interpreter, `sluice_testkit::python::interpreter`) that can import the
//! test functions in `tests/pymods`, pipelines run through it, pickled functions.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_dataset::{
    DatasetDef, DatasetError, Element, FunctionRegistry, Pickled, PyFunction, PyOp, PythonStage,
    UserFunctionFailure,
};
use sluice_pyexec::{Pool, PoolConfig};

pub fn pymods() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pymods")
}

/// A config for `processes` processes that can import `tests/pymods`.
pub fn config(processes: usize) -> PoolConfig {
    let mut c = PoolConfig::new(sluice_testkit::python::interpreter());
    c.processes = processes;
    c.call_timeout = Duration::from_secs(20);
    c.env = vec![("PYTHONPATH".into(), pymods().display().to_string())];
    c
}

pub fn pool(processes: usize) -> Arc<Pool> {
    Arc::new(Pool::start(config(processes)).expect("start the pool"))
}

pub fn registry(pool: &Arc<Pool>) -> FunctionRegistry {
    FunctionRegistry::builtin().with_python(pool.clone())
}

/// `sluice_test_fns:<name>`.
pub fn by_ref(name: &str) -> PyFunction {
    PyFunction::Ref(format!("sluice_test_fns:{name}"))
}

/// A stage with the interpreter's own version (as a client on it would write).
pub fn stage(pool: &Pool, op: PyOp, function: PyFunction) -> PythonStage {
    use sluice_dataset::PythonExecutor;
    PythonStage::new(op, function, pool.version())
}

pub fn run(def: &DatasetDef, registry: &FunctionRegistry) -> Vec<Result<Element, DatasetError>> {
    def.iter_local(registry).expect("start the pipeline").collect()
}

/// The int64 scalars of `def`'s output; panics on any error.
pub fn ints(def: &DatasetDef, registry: &FunctionRegistry) -> Vec<i64> {
    run(def, registry)
        .into_iter()
        .map(|r| r.expect("an element").as_i64().expect("an int64 scalar"))
        .collect()
}

/// The failure of a user-function error.
pub fn failure(r: &Result<Element, DatasetError>) -> &UserFunctionFailure {
    match r {
        Err(DatasetError::UserFunction(f)) => f,
        other => panic!("expected a user-function failure, got {other:?}"),
    }
}

/// `source` defines `f`; returns cloudpickle's bytes of it, made by the test venv.
pub fn pickle(source: &str) -> PyFunction {
    pickles(&[source]).pop().expect("one pickle")
}

/// Each source defines `f`; their pickles, made by one run of the test venv.
pub fn pickles(sources: &[&str]) -> Vec<PyFunction> {
    let script = format!(
        "import cloudpickle, sys\nfor source in {sources:?}:\n    ns = {{}}\n    \
         exec(source, ns)\n    print(cloudpickle.dumps(ns['f']).hex())\n"
    );
    let spec = sluice_testkit::Spec::new(sluice_testkit::python::interpreter(), ["-c", &script]);
    let out = sluice_testkit::run(&spec, None, Duration::from_secs(60)).expect("run python");
    assert!(out.success(), "pickling failed: {}", out.stderr);
    out.stdout
        .lines()
        .map(|hex| {
            let data = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            PyFunction::Pickle(Pickled { name: "f".into(), data })
        })
        .collect()
}
