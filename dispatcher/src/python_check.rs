//! Whether the registered workers can run a pipeline's Python stages, and the
//! messages that say why not.
//!
//! Pure functions of a definition and the workers' registered Python versions,
//! shared by `apply` (a pipeline whose pickled functions need two Python versions
//! is refused at registration; a static job keeps only the listed workers that
//! can run it) and the service (a job no registered worker can run is refused at
//! creation, naming the stage and what each worker runs, instead of waiting for
//! a worker that may never come).

use sluice_dataset::python::PythonNeeds;
use sluice_dataset::DatasetDef;

use crate::state::Worker;

/// Workers named in a refusal; the rest are counted.
const MAX_NAMED_WORKERS: usize = 8;
/// Characters of a stage's description in a refusal.
const MAX_STAGE_CHARS: usize = 300;

/// Why no worker can run a pipeline whose pickled functions need two Python
/// versions; `None` when they agree.
pub fn conflict(needs: &PythonNeeds) -> Option<String> {
    let ((_, first), (_, second)) = (needs.pickle_version.as_ref()?, needs.conflict.as_ref()?);
    let (first, second) = (shortened(first), shortened(second));
    Some(format!(
        "{first} and {second} were pickled by different Python versions: no worker can run \
         both; pickle every function with the same Python version, or ship the functions by \
         reference (\"package.module:function\")"
    ))
}

/// Why none of `workers` can run `def`; `None` when one can, when the pipeline has
/// no Python stage, or when no worker is registered (the job then waits for
/// workers, as every job does). Lost workers do not count: they are not running.
pub fn refusal<'a>(
    def: &DatasetDef,
    workers: impl IntoIterator<Item = &'a Worker>,
) -> Option<String> {
    let needs = def.python_needs();
    if !needs.any() {
        return None;
    }
    if let Some(message) = conflict(&needs) {
        return Some(message);
    }
    let live: Vec<&Worker> = workers.into_iter().filter(|w| !w.lost).collect();
    if live.is_empty() || live.iter().any(|w| w.can_run(&needs)) {
        return None;
    }
    let (stage, fix) = match &needs.pickle_version {
        Some(((major, minor), stage)) => (
            shortened(stage),
            format!(
                "start workers with --allow-python and Python {major}.{minor}, or ship the \
                 function by reference (\"package.module:function\")"
            ),
        ),
        None => {
            let (path, what) = &needs.stages[0];
            (shortened(&format!("{path} ({what})")), "start workers with --allow-python".into())
        }
    };
    let mut have: Vec<String> = live
        .iter()
        .take(MAX_NAMED_WORKERS)
        .map(|w| match &w.python_version {
            Some(v) => format!("{} runs Python {v}", w.address),
            None => format!("{} runs no Python stages", w.address),
        })
        .collect();
    if live.len() > MAX_NAMED_WORKERS {
        have.push(format!("and {} more", live.len() - MAX_NAMED_WORKERS));
    }
    Some(format!("{stage} cannot run on any worker: {} ({fix})", have.join(", ")))
}

/// A stage's description for a message, at most [`MAX_STAGE_CHARS`] characters (a
/// pickled function's name comes from the client: a refusal must stay small
/// enough to travel in a status).
fn shortened(stage: &str) -> String {
    match stage.char_indices().nth(MAX_STAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &stage[..cut]),
        None => stage.to_string(),
    }
}

/// The workers of `listed` that are registered and can run `needs`, in list order.
pub fn capable_workers<'a>(
    listed: &[String],
    needs: &PythonNeeds,
    worker: impl Fn(&str) -> Option<&'a Worker>,
) -> Vec<String> {
    listed.iter().filter(|a| worker(a).is_some_and(|w| w.can_run(needs))).cloned().collect()
}

/// Why a dispatcher that serves unauthenticated clients off loopback
/// (`anonymous_off_loopback`: `--insecure` without `--auth-tokens`) refuses `def`:
/// its Python stages are code the workers would run for anyone who reaches it.
pub fn anonymous_user_code(def: &DatasetDef, anonymous_off_loopback: bool) -> Option<String> {
    if !anonymous_off_loopback {
        return None;
    }
    let needs = def.python_needs();
    let (stage, what) = needs.stages.first()?;
    Some(format!(
        "{stage} ({}) is user code that workers would run, and this dispatcher accepts \
         clients without authentication off loopback (--insecure): give it --auth-tokens \
         (docs/security.md) to accept pipelines with Python stages",
        shortened(what)
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use sluice_dataset::python::{Pickled, PyFunction, PyOp, PythonStage};
    use sluice_dataset::Stage;

    use super::*;

    fn worker(address: &str, python: Option<&str>) -> Worker {
        Worker {
            address: address.into(),
            worker_uid: 1,
            functions: BTreeSet::new(),
            active_tasks: Default::default(),
            lost: false,
            python_version: python.map(String::from),
        }
    }

    fn with_pickle(version: &str) -> DatasetDef {
        let f = PyFunction::Pickle(Pickled { name: "<lambda>".into(), data: vec![1] });
        let mut def = DatasetDef::range(3);
        def.stages.push(Stage::Python(PythonStage::new(PyOp::Map, f, version)));
        def
    }

    #[test]
    fn a_pickle_no_worker_can_load_names_the_stage_every_worker_and_the_fix() {
        let workers = [worker("127.0.0.1:5051", Some("3.11.7")), worker("127.0.0.1:5052", None)];
        let message = refusal(&with_pickle("3.12.1"), &workers).expect("refused");
        assert_eq!(
            message,
            "stages[1] (python map `<lambda>`, pickled with Python 3.12.1) cannot run on any \
             worker: 127.0.0.1:5051 runs Python 3.11.7, 127.0.0.1:5052 runs no Python stages \
             (start workers with --allow-python and Python 3.12, or ship the function by \
             reference (\"package.module:function\"))"
        );
        let fine = [worker("a:1", None), worker("b:1", Some("3.12.0"))];
        assert_eq!(refusal(&with_pickle("3.12.1"), &fine), None);
    }

    #[test]
    fn no_worker_yet_lost_workers_and_plain_pipelines_are_not_refused() {
        assert_eq!(refusal(&with_pickle("3.12.1"), &[]), None, "the job waits for workers");
        let mut lost = worker("a:1", None);
        lost.lost = true;
        assert_eq!(refusal(&with_pickle("3.12.1"), [&lost]), None);
        assert_eq!(refusal(&DatasetDef::range(3), &[worker("a:1", None)]), None);
    }

    #[test]
    fn a_long_function_name_is_shortened_in_refusals() {
        let f = PyFunction::Pickle(Pickled { name: "f".repeat(100_000), data: vec![1] });
        let mut def = DatasetDef::range(3);
        def.stages.push(Stage::Python(PythonStage::new(PyOp::Map, f, "3.12.1")));
        let message = refusal(&def, &[worker("a:1", None)]).expect("refused");
        assert!(message.len() < 1000 && message.contains("a:1 runs no Python stages"), "{message}");
    }

    #[test]
    fn two_pickle_versions_conflict_whatever_the_workers() {
        let mut def = with_pickle("3.11.7");
        def.stages.extend(with_pickle("3.12.1").stages.into_iter().skip(1));
        let message = conflict(&def.python_needs()).expect("conflict");
        assert!(message.contains("stages[1]") && message.contains("stages[2]"), "{message}");
        assert!(message.contains("no worker can run both"), "{message}");
        assert_eq!(refusal(&def, &[worker("a:1", Some("3.11.7"))]), Some(message));
    }

    #[test]
    fn an_anonymous_dispatcher_off_loopback_refuses_python_stages_only() {
        let def = with_pickle("3.11.7");
        assert_eq!(anonymous_user_code(&def, false), None, "loopback or tokens: accepted");
        let message = anonymous_user_code(&def, true).expect("refused");
        assert!(message.starts_with("stages[1] (python map `<lambda>`)"), "{message}");
        assert!(message.contains("--auth-tokens") && message.contains("--insecure"), "{message}");
        assert_eq!(anonymous_user_code(&DatasetDef::range(3), true), None, "no user code");
    }
}
