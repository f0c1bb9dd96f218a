//! File access is granted, not assumed (issue 14): the real `sluice` binary as
//! processes on loopback, with `--data-roots`. The dispatcher refuses at
//! registration a spec naming a file outside its roots; a worker checks every file
//! again before opening it, failing that read (not itself) when its roots do not
//! admit the file.

mod common;

use std::os::unix::fs::symlink;
use std::path::Path;

use common::{run_sluice, wait_blocking};

const FLAG: &str = "--data-roots";

/// `<tmp>/allowed/a.txt`, `<tmp>/other/b.txt` and `<tmp>/outside/secret.txt`.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().expect("tempdir");
        for (sub, name, text) in [
            ("allowed", "a.txt", "a1\na2\n"),
            ("other", "b.txt", "b1\n"),
            ("outside", "secret.txt", "s\n"),
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
            std::fs::write(dir.path().join(sub).join(name), text).expect("write");
        }
        Files { dir }
    }

    fn path(&self, rel: &str) -> String {
        self.dir.path().join(rel).to_string_lossy().into_owned()
    }
}

fn text_lines(file: &str) -> String {
    serde_json::json!({"stages": [{"text_lines": {"files": [file]}}]}).to_string()
}

fn register(dispatcher: &str, spec: &str) -> Result<String, String> {
    let (ok, out, err) = run_sluice(&["register", "--dispatcher", dispatcher, "-"], Some(spec));
    if ok {
        Ok(out.trim().to_string())
    } else {
        Err(err)
    }
}

fn read(dispatcher: &str, id: &str) -> (bool, String, String) {
    let args =
        ["read", "--dispatcher", dispatcher, "--dataset-id", id, "--mode", "parallel_epochs"];
    run_sluice(&args, None)
}

fn assert_refused(err: &str, path: &str) {
    assert!(err.contains(path) && err.contains(FLAG), "names the path and the flag: {err}");
}

/// Waits until the dispatcher lists `n` workers.
fn wait_workers(dispatcher: &str, n: usize) {
    wait_blocking(&format!("{n} worker(s) registered"), || {
        let (ok, out, _) = run_sluice(&["status", "--dispatcher", dispatcher], None);
        ok && out.contains(&format!("WORKERS ({n})"))
    });
}

/// `from_tensor_slices` of one string tensor (the `tensors` form) holding
/// `names`, flat-mapped through `text_lines`.
fn tensor_file_names(names: &[&str]) -> String {
    use sluice_dataset::{DType, DatasetDef, SliceValues, Tensor};
    let t = Tensor::from_items(DType::String, vec![names.len() as u64], names).expect("tensor");
    DatasetDef::from_tensor_slices(SliceValues::Tensors { tensors: vec![t], names: None })
        .flat_map("text_lines", vec![])
        .to_json()
}

#[test]
fn registration_outside_the_data_roots_is_refused_naming_the_path_and_the_flag() {
    let f = Files::new();
    let allowed = f.path("allowed");
    let dispatcher = common::server(&["dispatcher", "--port", "0", FLAG, &allowed]);
    let d = dispatcher.address().to_string();

    let secret = f.path("outside/secret.txt");
    for spec in [
        text_lines(&secret),
        text_lines("/etc/passwd"),
        // `..` out of the root.
        text_lines(&format!("{allowed}/../outside/secret.txt")),
        // A glob whose fixed directory is outside.
        serde_json::json!({"stages": [{"list_files": {"pattern": f.path("outside/*")}}]})
            .to_string(),
        // Nested pipelines are checked too.
        serde_json::json!({"stages": [
            {"text_lines": {"files": [f.path("allowed/a.txt")]}},
            {"concatenate": {"dataset": {"stages": [{"text_lines": {"files": [secret]}}]}}}
        ]})
        .to_string(),
        // File names carried as strings into a file-reading function.
        serde_json::json!({"stages": [
            {"from_tensor_slices": {"strings": [secret]}},
            {"flat_map": {"fn": "text_lines"}}
        ]})
        .to_string(),
        // ... and in a string column of the `tensors` form (issue 31, defect 8).
        tensor_file_names(&["labels", &secret]),
    ] {
        let err = register(&d, &spec).expect_err(&spec);
        assert!(err.contains("InvalidArgument"), "{err}");
        let named = if spec.contains("/etc/passwd") { "/etc/passwd" } else { "outside" };
        assert_refused(&err, named);
    }
    // A glob under the root whose matches include a symlink out of it.
    symlink(&secret, f.path("allowed/z.txt")).expect("symlink");
    let glob =
        serde_json::json!({"stages": [{"list_files": {"pattern": format!("{allowed}/*.txt")}}]});
    let err = register(&d, &glob.to_string()).expect_err("a match escapes");
    assert_refused(&err, &f.path("allowed/z.txt"));
    std::fs::remove_file(f.path("allowed/z.txt")).expect("rm");
    // Under the root: accepted, and read.
    let _worker = common::server(&["worker", "--dispatcher", &d, "--port", "0", FLAG, &allowed]);
    wait_workers(&d, 1);
    let id = register(&d, &text_lines(&f.path("allowed/a.txt"))).expect("under the root");
    let (ok, out, err) = read(&d, &id);
    assert!(ok, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["\"a1\"", "\"a2\""]);
}

#[test]
fn the_loopback_defaults_refuse_system_files() {
    let dispatcher = common::server(&["dispatcher", "--port", "0"]);
    let d = dispatcher.address().to_string();
    for file in ["/etc/passwd", "/proc/self/environ"] {
        let err = register(&d, &text_lines(file)).expect_err(file);
        assert_refused(&err, file);
    }
    // The temp directory is a default root: tests and `sample-data` write there.
    let f = Files::new();
    register(&d, &text_lines(&f.path("allowed/a.txt"))).expect("temp dir admitted");
}

#[test]
fn a_worker_refuses_a_file_its_roots_do_not_admit_and_keeps_serving() {
    let f = Files::new();
    let base = f.path("");
    let allowed = f.path("allowed");
    // The dispatcher admits more than the worker does.
    let dispatcher = common::server(&["dispatcher", "--port", "0", FLAG, &base]);
    let d = dispatcher.address().to_string();
    let _worker = common::server(&["worker", "--dispatcher", &d, "--port", "0", FLAG, &allowed]);
    wait_workers(&d, 1);

    let other = f.path("other/b.txt");
    let id = register(&d, &text_lines(&other)).expect("the dispatcher admits it");
    let (ok, out, err) = read(&d, &id);
    assert!(!ok, "the read must fail, not end empty: {out}");
    assert!(!out.contains("b1"), "nothing of the file is read: {out}");
    assert_refused(&err, &other);

    // A symlink that pointed inside at registration and out of the root by the read.
    let link = f.path("allowed/link.txt");
    symlink(f.path("allowed/a.txt"), &link).expect("symlink");
    let id = register(&d, &text_lines(&link)).expect("points inside now");
    std::fs::remove_file(&link).expect("rm");
    symlink(f.path("outside/secret.txt"), &link).expect("re-point");
    let (ok, out, err) = read(&d, &id);
    assert!(!ok && !out.contains('s'), "{out}");
    assert_refused(&err, &link);

    // The same worker still serves a file under its root.
    let id = register(&d, &text_lines(&f.path("allowed/a.txt"))).expect("registers");
    let (ok, out, err) = read(&d, &id);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(Path::new(&allowed).exists());
}

#[test]
fn a_double_star_over_a_symlink_loop_in_a_data_root_lists_each_file_once() {
    // Issue 31, defect 7: such a pattern kept most of a core busy for 15-27 s
    // after the caller had given up. Now the walk enters a loop once, and every
    // listing is bounded in depth, entries and time.
    let f = Files::new();
    let allowed = f.path("allowed");
    symlink(&allowed, f.path("allowed/loop")).expect("symlink");
    symlink(f.path("allowed"), f.path("allowed/again")).expect("symlink");
    let dispatcher = common::server(&["dispatcher", "--port", "0", FLAG, &allowed]);
    let d = dispatcher.address().to_string();
    let _worker = common::server(&["worker", "--dispatcher", &d, "--port", "0", FLAG, &allowed]);
    wait_workers(&d, 1);
    let spec = serde_json::json!({"stages": [
        {"list_files": {"pattern": format!("{allowed}/**/*.txt")}},
        {"flat_map": {"fn": "text_lines"}}
    ]});
    let id = register(&d, &spec.to_string()).expect("listed");
    let (ok, out, err) = read(&d, &id);
    assert!(ok, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["\"a1\"", "\"a2\""], "the file once");
}
