//! Python stages: the user's own functions in a pipeline (`Dataset.map(fn)` and
//! friends in the Python package), run on a worker by a pool of Python processes.
//!
//! This module is the contract between three parties that never share code:
//! - the Python client writes a [`PythonStage`] into the spec (JSON `python`), with
//!   the function by reference (`"package.module:function"`) or by value (cloudpickle
//!   bytes, base64), and the Python version it was made with;
//! - the dispatcher reads [`DatasetDef::python_needs`] to give the job only to workers
//!   that can run it ([`PythonNeeds::admits`]) and to refuse it, naming the stage,
//!   when none can;
//! - a worker's [`PythonExecutor`] (the process pool of `sluice-pyexec`) runs the
//!   calls the executor's Python stage (`exec::python`) submits.
//!
//! Why a trait here and the processes elsewhere: the dataset crate runs pipelines
//! and must not start processes; a worker started without `--allow-python` has no
//! executor, and its pipelines fail at a Python stage with an error that says so.

use std::sync::mpsc::Sender;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::def::{DatasetDef, Stage};
use crate::tensor::Element;

/// What a Python stage does with its function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PyOp {
    /// `fn(element) -> element`.
    Map,
    /// `fn(element) -> bool`: keeps the elements for which it is true.
    Filter,
    /// `fn(element) -> iterable of elements`.
    FlatMap,
    /// `fn(batch) -> batch`: `batch_size` elements stacked into columns (a dict or
    /// tuple of numpy arrays, Ray Data's shape); the returned batch is split back
    /// into elements along its first dimension.
    MapBatches,
}

impl PyOp {
    pub fn name(self) -> &'static str {
        match self {
            PyOp::Map => "map",
            PyOp::Filter => "filter",
            PyOp::FlatMap => "flat_map",
            PyOp::MapBatches => "map_batches",
        }
    }
}

/// How the function travels. JSON: `{"ref": "mypkg.aug:flip"}` or
/// `{"pickle": {"name": "<lambda>", "data": "<base64>"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PyFunction {
    /// By reference: `package.module:qualname`, imported on the worker (any Python
    /// version may run it).
    Ref(String),
    /// By value: cloudpickle's bytes (only a worker of the same Python minor version
    /// may load them).
    Pickle(Pickled),
}

/// A function serialized with cloudpickle.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pickled {
    /// The function's `__qualname__`, for messages (`<lambda>`, `tokenize`).
    pub name: String,
    #[serde(serialize_with = "to_base64", deserialize_with = "from_base64")]
    pub data: Vec<u8>,
}

impl PyFunction {
    /// A name for messages: the reference, or the pickled function's name.
    pub fn display_name(&self) -> &str {
        match self {
            PyFunction::Ref(r) => r,
            PyFunction::Pickle(p) => &p.name,
        }
    }
}

fn one_u32() -> u32 {
    1
}
fn is_one(n: &u32) -> bool {
    *n == 1
}
fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A stage that runs the user's Python function (JSON `python`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonStage {
    pub op: PyOp,
    #[serde(rename = "fn")]
    pub function: PyFunction,
    /// The Python version the client that wrote the stage ran (`3.11.7`).
    pub python: String,
    /// Calls in flight at once (0 = one per Python process of the worker).
    #[serde(default = "one_u32", skip_serializing_if = "is_one")]
    pub num_parallel_calls: u32,
    /// With several calls in flight: keep the input order (`true`) or yield results
    /// as they complete.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub deterministic: bool,
    /// `map_batches` only (required there): elements per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u64>,
    /// `map_batches` only: drop a last batch smaller than `batch_size`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub drop_remainder: bool,
    /// Times an element whose Python process crashed or hung is tried again on a
    /// fresh process (0 or 1). An exception raised by the function is never retried.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
}

/// At most this many retries of a crashed or hung call.
pub const MAX_PY_RETRIES: u32 = 1;

impl PythonStage {
    /// `op` with `function`, defaults elsewhere.
    pub fn new(op: PyOp, function: PyFunction, python: impl Into<String>) -> Self {
        PythonStage {
            op,
            function,
            python: python.into(),
            num_parallel_calls: 1,
            deterministic: true,
            batch_size: None,
            drop_remainder: false,
            retries: 0,
        }
    }

    /// The structure's checks; `Err((field, message))` with `field` relative to the
    /// stage (e.g. `.python.batch_size`).
    pub(crate) fn check(&self) -> Result<(), (String, String)> {
        let bad = |f: &str, m: String| Err((format!(".python.{f}"), m));
        if parse_version(&self.python).is_none() {
            return bad(
                "python",
                format!(
                    "`{}` is not a Python version; write the client's `MAJOR.MINOR[.PATCH]` \
                     (platform.python_version())",
                    self.python
                ),
            );
        }
        match &self.function {
            PyFunction::Ref(r) => check_reference(r).or_else(|m| bad("fn.ref", m))?,
            PyFunction::Pickle(p) if p.data.is_empty() => {
                return bad(
                    "fn.pickle.data",
                    "is empty; pickle the function with cloudpickle".into(),
                )
            }
            PyFunction::Pickle(_) => {}
        }
        match (self.op, self.batch_size) {
            (PyOp::MapBatches, None) => {
                return bad("batch_size", "map_batches needs a batch_size".into());
            }
            (PyOp::MapBatches, Some(0)) => return bad("batch_size", "must be > 0".into()),
            (PyOp::MapBatches, Some(n)) if n > crate::bounds::MAX_BATCH_SIZE => {
                return bad(
                    "batch_size",
                    format!("must be at most {} elements", crate::bounds::MAX_BATCH_SIZE),
                );
            }
            (PyOp::MapBatches, Some(_)) => {}
            (op, Some(_)) => {
                return bad(
                    "batch_size",
                    format!("goes with map_batches only, not with {}", op.name()),
                );
            }
            (_, None) if self.drop_remainder => {
                return bad("drop_remainder", "goes with map_batches only".into());
            }
            (_, None) => {}
        }
        if self.retries > MAX_PY_RETRIES {
            return bad("retries", format!("must be at most {MAX_PY_RETRIES}"));
        }
        if self.num_parallel_calls > crate::def::MAX_PARALLEL_CALLS {
            return bad(
                "num_parallel_calls",
                format!(
                    "must be at most {} (0 = one per Python process)",
                    crate::def::MAX_PARALLEL_CALLS
                ),
            );
        }
        Ok(())
    }
}

/// `package.module:qualname`: dotted identifiers on both sides of one `:`.
fn check_reference(r: &str) -> Result<(), String> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|part| {
                let mut chars = part.chars();
                matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
                    && chars.all(|c| c == '_' || c.is_alphanumeric())
            })
    };
    match r.split_once(':') {
        Some((module, name)) if ident(module) && ident(name) => Ok(()),
        _ => Err(format!(
            "`{r}` is not a function reference; write `package.module:function` (a function \
             importable on the workers), or pass the function itself to ship it by value"
        )),
    }
}

/// `(major, minor)` of `3.11` or `3.11.7` (a suffix such as `+` is ignored).
pub fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
    Some((major, minor.parse().ok()?))
}

/// What a pipeline asks of the workers that run it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PythonNeeds {
    /// The Python stages, as `(path, description)`, e.g. `("stages[2]", "python map
    /// `<lambda>`")`, in pipeline order (nested pipelines included).
    pub stages: Vec<(String, String)>,
    /// The `(major, minor)` every pickled function was made with, with the first
    /// stage that needs it; `None` when no function is pickled.
    pub pickle_version: Option<((u32, u32), String)>,
    /// A second, different version some other pickled function needs: no worker can
    /// run both (the pipeline is refused).
    pub conflict: Option<((u32, u32), String)>,
}

impl PythonNeeds {
    /// Whether the pipeline has Python stages at all.
    pub fn any(&self) -> bool {
        !self.stages.is_empty()
    }

    /// Whether a worker running Python `version` (`None`: it cannot run Python
    /// stages) can run the pipeline.
    pub fn admits(&self, version: Option<&str>) -> bool {
        if !self.any() {
            return true;
        }
        if self.conflict.is_some() {
            return false;
        }
        match (version, &self.pickle_version) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(v), Some((needed, _))) => parse_version(v) == Some(*needed),
        }
    }
}

impl DatasetDef {
    /// The Python stages of this pipeline (nested ones included) and the Python
    /// version their pickled functions need.
    pub fn python_needs(&self) -> PythonNeeds {
        let mut needs = PythonNeeds::default();
        self.collect_python("", &mut needs);
        needs
    }

    fn collect_python(&self, prefix: &str, needs: &mut PythonNeeds) {
        for (i, stage) in self.stages.iter().enumerate() {
            // Named only for the stages that need it: a plain pipeline allocates nothing.
            let path = || format!("{prefix}stages[{i}]");
            match stage {
                Stage::Python(p) => {
                    let (path, what) =
                        (path(), format!("python {} `{}`", p.op.name(), p.function.display_name()));
                    needs.stages.push((path.clone(), what.clone()));
                    if let (PyFunction::Pickle(_), Some(v)) =
                        (&p.function, parse_version(&p.python))
                    {
                        let here = format!("{path} ({what}, pickled with Python {})", p.python);
                        match &needs.pickle_version {
                            None => needs.pickle_version = Some((v, here)),
                            Some((first, _)) if *first != v && needs.conflict.is_none() => {
                                needs.conflict = Some((v, here));
                            }
                            Some(_) => {}
                        }
                    }
                }
                Stage::Zip { datasets } => {
                    for (j, d) in datasets.iter().enumerate() {
                        d.collect_python(&format!("{}.zip.datasets[{j}].", path()), needs);
                    }
                }
                Stage::Concatenate { dataset } => {
                    dataset.collect_python(&format!("{}.concatenate.dataset.", path()), needs);
                }
                _ => {}
            }
        }
    }
}

/// Why a Python call failed, as the Python side (or the pool supervising it) saw
/// it. The executor's stage adds the stage and function; the worker and the client
/// add the worker's address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PyFailure {
    /// The exception's class (`ValueError`, `ModuleNotFoundError`), or one of the
    /// pool's own kinds: `ProcessDied`, `Timeout`, `VersionMismatch`,
    /// `NoPythonExecutor`, `BadOutput`.
    pub error_type: String,
    /// The exception's message (`str(e)`), or what the pool saw.
    pub message: String,
    /// Python's formatted traceback, empty when there is none.
    pub traceback: String,
}

impl PyFailure {
    pub fn new(error_type: impl Into<String>, message: impl Into<String>) -> Self {
        PyFailure {
            error_type: error_type.into(),
            message: message.into(),
            traceback: String::new(),
        }
    }
}

/// When a user function failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Loading it (import, unpickling, a Python version mismatch): the stage cannot
    /// run at all; the read ends even under `ignore_errors`.
    Load,
    /// Calling it on an element: that element fails, the stage goes on.
    #[default]
    Call,
}

/// A user function failed: what reaches the reader (`sluice.UserFunctionError` in
/// Python). Travels from worker to client as JSON in the status's details.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserFunctionFailure {
    /// The stage's path in the pipeline, e.g. `stages[2]`.
    pub stage: String,
    /// `map`, `filter`, `flat_map` or `map_batches`.
    pub op: String,
    /// The function's reference or pickled name.
    pub function: String,
    /// The worker's address (`host:port`), empty until the worker or client fills it.
    #[serde(default)]
    pub worker: String,
    #[serde(default)]
    pub phase: Phase,
    #[serde(flatten)]
    pub failure: PyFailure,
}

impl UserFunctionFailure {
    /// The JSON a worker puts in the details of the status that ends a read
    /// (`sluice_proto::contract::Reason::UserFunction`).
    pub fn to_details(&self) -> Vec<u8> {
        // A struct of strings always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// What [`UserFunctionFailure::to_details`] wrote; `None` for anything else.
    pub fn from_details(details: &[u8]) -> Option<Self> {
        serde_json::from_slice(details).ok()
    }
}

impl std::fmt::Display for UserFunctionFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The worker's address is filled in by the worker and the client; a log line
        // written before that names no worker rather than a placeholder.
        let on = if self.worker.is_empty() {
            String::new()
        } else {
            format!(" on worker {}", self.worker)
        };
        let what = match self.phase {
            Phase::Load => "cannot be loaded",
            Phase::Call => "failed",
        };
        write!(
            f,
            "the Python {} function `{}` of {} {what}{on}: {}: {}",
            self.op, self.function, self.stage, self.failure.error_type, self.failure.message
        )?;
        if !self.failure.traceback.is_empty() {
            write!(f, "\n{}", self.failure.traceback.trim_end())?;
        }
        Ok(())
    }
}

/// One call of a Python function: `op` applied to `inputs` (for `map_batches`, one
/// input: the stacked batch).
#[derive(Clone, Debug)]
pub struct PyCall {
    pub function: Arc<PyFunction>,
    /// The Python version the function was made with (a pickled function needs the
    /// same minor version).
    pub made_with: String,
    pub op: PyOp,
    pub inputs: Vec<Element>,
    /// Times to try again an element whose process crashed or hung (0 or 1).
    pub retries: u32,
}

/// What became of one input of a call.
#[derive(Clone, Debug, PartialEq)]
pub enum PyOutcome {
    /// `map`, `map_batches`: the result.
    Element(Element),
    /// `filter`: whether to keep the input.
    Keep(bool),
    /// `flat_map`: the elements made of the input.
    Elements(Vec<Element>),
    /// The function failed on this input (the others are unaffected).
    Failed(PyFailure),
}

/// One outcome per input, in input order; `Err` when the call could not run at all
/// (the function could not be loaded: not importable, another Python version).
pub type PyResponse = Result<Vec<PyOutcome>, PyFailure>;

/// The answer to a submitted call, tagged with the caller's ticket.
#[derive(Debug)]
pub struct PyReply {
    pub ticket: u64,
    pub response: PyResponse,
}

/// Runs Python calls: a worker's pool of Python processes.
pub trait PythonExecutor: Send + Sync {
    /// The Python version the processes run (`3.11.7`).
    fn version(&self) -> &str;
    /// Processes in the pool (what `num_parallel_calls: 0` means).
    fn processes(&self) -> usize;
    /// Loads `function` in a process: `Err` says why it cannot run here (e.g. the
    /// module is not importable, or it was pickled by another Python version).
    /// Called once when a stage starts, so such errors surface at the job's start.
    fn prepare(&self, function: &Arc<PyFunction>, made_with: &str) -> Result<(), PyFailure>;
    /// Submits a call; exactly one [`PyReply`] with `ticket` is sent to `reply`
    /// (unless the receiver is gone). Blocks while the pool's queue is full
    /// (bounded), so a stage never has more calls queued than it has in flight.
    fn submit(&self, call: PyCall, ticket: u64, reply: Sender<PyReply>);
}

/// A shared executor.
pub type SharedPythonExecutor = Arc<dyn PythonExecutor>;

fn to_base64<S: Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(data))
}

fn from_base64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    STANDARD.decode(text.as_bytes()).map_err(|e| {
        serde::de::Error::custom(format!(
            "is not valid base64 ({e}); write cloudpickle's bytes with the standard alphabet \
             and `=` padding, e.g. base64.b64encode(cloudpickle.dumps(fn))"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pickled(version: &str) -> Stage {
        let f = PyFunction::Pickle(Pickled { name: "<lambda>".into(), data: vec![1, 2] });
        Stage::Python(PythonStage::new(PyOp::Map, f, version))
    }

    #[test]
    fn versions_parse_to_major_minor() {
        assert_eq!(parse_version("3.11.7"), Some((3, 11)));
        assert_eq!(parse_version("3.12"), Some((3, 12)));
        assert_eq!(parse_version("3.13.0+"), Some((3, 13)));
        assert_eq!(parse_version("3"), None);
        assert_eq!(parse_version("three.eleven"), None);
    }

    #[test]
    fn references_are_module_colon_function() {
        assert!(check_reference("mypkg.aug:flip").is_ok());
        assert!(check_reference("m:C.method").is_ok());
        for bad in ["mypkg.aug", ":f", "m:", "m::f", "1m:f", "m:f-g", "m.:f"] {
            assert!(check_reference(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn needs_admit_workers_by_version() {
        let plain = DatasetDef::range(3);
        assert!(plain.python_needs().admits(None));
        let by_ref = DatasetDef {
            stages: vec![
                Stage::Range { start: 0, stop: 3, step: 1 },
                Stage::Python(PythonStage::new(PyOp::Map, PyFunction::Ref("m:f".into()), "3.12")),
            ],
        };
        let needs = by_ref.python_needs();
        assert_eq!(needs.stages, vec![("stages[1]".into(), "python map `m:f`".into())]);
        assert!(!needs.admits(None));
        assert!(needs.admits(Some("3.11.2")), "a reference runs on any version");
        let mut pickle = DatasetDef::range(3);
        pickle.stages.push(pickled("3.11.7"));
        let needs = pickle.python_needs();
        assert!(needs.admits(Some("3.11.2")));
        assert!(!needs.admits(Some("3.12.1")));
        pickle.stages.push(pickled("3.12.0"));
        let needs = pickle.python_needs();
        assert!(needs.conflict.is_some());
        assert!(!needs.admits(Some("3.11.2")) && !needs.admits(Some("3.12.0")));
    }
}
