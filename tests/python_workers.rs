//! `sluice worker --allow-python` as an operator runs it (issue 15): real `sluice`
//! processes on loopback, a real interpreter (the tests' venv, with numpy). A
//! pipeline's Python stages run on the worker; user code is refused where it
//! would run unauthenticated off loopback; a bad interpreter stops the worker
//! before it serves.

mod common;

use common::{run_sluice, wait_blocking};

fn python() -> String {
    sluice_testkit::python::interpreter().display().to_string()
}

fn register(dispatcher: &str, spec: &str) -> String {
    let (ok, id, err) = run_sluice(&["register", "--dispatcher", dispatcher, "-"], Some(spec));
    assert!(ok, "{err}");
    id.trim().to_string()
}

fn read(dispatcher: &str, id: &str) -> (bool, String, String) {
    let args =
        ["read", "--dispatcher", dispatcher, "--dataset-id", id, "--mode", "parallel_epochs"];
    run_sluice(&args, None)
}

/// A stage calling a standard-library function by reference.
fn stage(op: &str, reference: &str) -> String {
    format!(r#"{{"python": {{"op": "{op}", "fn": {{"ref": "{reference}"}}, "python": "3.11"}}}}"#)
}

#[test]
fn a_worker_with_allow_python_runs_python_stages_between_rust_stages() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    let py = python();
    let args = ["worker", "--dispatcher", &d, "--port", "0", "--allow-python", "--python", &py];
    let _worker = common::server(&[&args[..], &["--python-processes", "2"]].concat());
    wait_blocking("the worker registered", || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
        ok && out.contains("WORKERS (1)")
    });
    // Rust square, Python negation, Python filter on truth (drops the 0), Rust add 1.
    let spec = format!(
        r#"{{"stages": [{{"range": {{"stop": 6}}}}, {{"map": {{"fn": "square"}}}}, {}, {},
            {{"map": {{"fn": "add", "args": [1]}}}}]}}"#,
        stage("map", "operator:neg"),
        stage("filter", "operator:truth"),
    );
    let (ok, out, err) = read(&d, &register(&d, &spec));
    assert!(ok, "{err}");
    let values: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(values, [0, -3, -8, -15, -24], "{err}");

    // The function raises on -2 and -1: the read fails with Python's exception.
    let spec = format!(
        r#"{{"stages": [{{"range": {{"start": -2, "stop": 3}}}}, {}]}}"#,
        stage("map", "math:factorial")
    );
    let (ok, _, err) = read(&d, &register(&d, &spec));
    assert!(!ok, "the read must fail: {err}");
    assert!(err.contains("ValueError: factorial() not defined for negative values"), "{err}");
    assert!(err.contains("math:factorial") && err.contains("stages[1]"), "{err}");

    // The same with ignore_errors: the failing elements are skipped.
    let spec = format!(
        r#"{{"stages": [{{"range": {{"start": -2, "stop": 4}}}}, {}, {{"ignore_errors": {{}}}}]}}"#,
        stage("map", "math:factorial")
    );
    let (ok, out, err) = read(&d, &register(&d, &spec));
    assert!(ok, "{err}");
    let values: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(values, [1, 1, 2, 6], "{err}");

    // A module the worker cannot import: the read fails at its start, naming it.
    let spec = format!(
        r#"{{"stages": [{{"range": {{"stop": 3}}}}, {}]}}"#,
        stage("map", "mypkg.aug:flip")
    );
    let (ok, _, err) = read(&d, &register(&d, &spec));
    assert!(!ok && err.contains("No module named 'mypkg'"), "{err}");
    assert!(err.contains("cannot be loaded"), "{err}");
}

#[test]
fn a_dynamic_read_through_python_stages_on_two_workers_gets_each_element_once() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    let py = python();
    let args = ["worker", "--dispatcher", &d, "--port", "0", "--allow-python", "--python", &py];
    let _workers = [common::server(&args), common::server(&args)];
    wait_blocking("both workers registered", || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
        ok && out.contains("WORKERS (2)")
    });
    let spec = format!(
        r#"{{"stages": [{{"range": {{"stop": 3000}}}}, {}]}}"#,
        stage("map", "operator:neg")
    );
    let id = register(&d, &spec);
    let args = ["read", "--dispatcher", &d, "--dataset-id", &id, "--mode", "dynamic"];
    let (ok, out, err) = run_sluice(&args, None);
    assert!(ok, "{err}");
    let mut values: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    values.sort_unstable();
    let expected: Vec<i64> = (0..3000).map(|x: i64| -x).rev().collect();
    assert_eq!(values, expected, "each element exactly once");
}

/// Functions that take their Python process down, or never return.
const BAD_FUNCTIONS: &str = "import os, time\n\n\
def abort(x):\n    os.abort()\n\n\
def exit(x):\n    os._exit(3)\n\n\
def hang(x):\n    time.sleep(3600)\n";

#[test]
fn the_worker_survives_python_processes_that_abort_exit_or_hang() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sluice_bad_fns.py"), BAD_FUNCTIONS).unwrap();
    let path = [("PYTHONPATH".to_string(), dir.path().display().to_string())];
    let mut worker = common::server_env(
        &[
            "worker",
            "--dispatcher",
            &d,
            "--port",
            "0",
            "--allow-python",
            "--python",
            &py,
            "--python-processes",
            "1",
            "--python-call-timeout-secs",
            "1",
        ],
        &path,
    );
    wait_blocking("the worker registered", || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", &d], None);
        ok && out.contains("WORKERS (1)")
    });
    let cases = [
        ("sluice_bad_fns:abort", "ProcessDied"),
        ("sluice_bad_fns:exit", "ProcessDied"),
        ("sluice_bad_fns:hang", "Timeout"),
    ];
    for (reference, error) in cases {
        let spec =
            format!(r#"{{"stages": [{{"range": {{"stop": 2}}}}, {}]}}"#, stage("map", reference));
        let (ok, _, err) = read(&d, &register(&d, &spec));
        assert!(!ok, "{reference}: the read must fail: {err}");
        assert!(err.contains(error) && err.contains(reference), "{reference}: {err}");
        assert!(!worker.exited(), "the worker died of {reference}");
        // And the same worker still runs Python stages.
        let spec = format!(
            r#"{{"stages": [{{"range": {{"stop": 3}}}}, {}]}}"#,
            stage("map", "operator:neg")
        );
        let (ok, out, err) = read(&d, &register(&d, &spec));
        assert!(ok, "after {reference}: {err}");
        assert_eq!(out.lines().map(str::trim).collect::<Vec<_>>(), ["0", "-1", "-2"], "{err}");
    }
}

#[test]
fn user_code_off_loopback_without_tokens_is_refused_even_with_insecure() {
    let args = ["worker", "--host", "0.0.0.0", "--port", "0", "--allow-python", "--insecure"];
    let (ok, out, err) = run_sluice(&args, None);
    assert!(!ok, "must be refused: {out} {err}");
    assert!(!out.contains("listening on"), "refused before binding: {out}");
    assert!(err.contains("--allow-python") && err.contains("--auth-tokens"), "{err}");
    assert!(err.contains("--insecure does not lift this"), "{err}");
}

#[test]
fn an_interpreter_that_cannot_run_python_stages_stops_the_worker_before_it_serves() {
    let missing = "/nonexistent/bin/python3";
    let args = ["worker", "--port", "0", "--allow-python", "--python", missing];
    let (ok, out, err) = run_sluice(&args, None);
    assert!(!ok, "must fail: {out} {err}");
    assert!(!out.contains("listening on"), "{out}");
    assert!(err.contains("--allow-python") && err.contains(missing), "{err}");
}
