//! What cannot run is refused early and says why: a module that is not
//! importable, a pickle made by another Python, an interpreter that cannot start
//! or lacks numpy.

mod common;

use std::sync::Arc;

use common::*;
use sluice_dataset::{DatasetDef, Phase, PyFunction, PyOp, PythonExecutor};
use sluice_pyexec::{Pool, PoolConfig, PoolError};

#[test]
fn a_module_that_is_not_importable_is_refused_at_prepare_with_its_name() {
    let pool = pool(1);
    let f =
        pool.prepare(&Arc::new(PyFunction::Ref("mypkg.aug:flip".into())), "3.11.7").unwrap_err();
    assert_eq!(f.error_type, "ModuleNotFoundError");
    assert_eq!(f.message, "module `mypkg.aug` is not importable: No module named 'mypkg'");
    let f = pool.prepare(&Arc::new(by_ref("no_such_fn")), "3.11").unwrap_err();
    assert_eq!(f.error_type, "AttributeError");
    assert!(f.message.contains("has no attribute `no_such_fn`"), "{}", f.message);
    let f = pool.prepare(&Arc::new(by_ref("VALUE")), "3.11").unwrap_err();
    assert_eq!(f.error_type, "TypeError");
    // Through a pipeline: one load failure ends the stage.
    let reg = registry(&pool);
    let def = DatasetDef::range(3).python(stage(
        &pool,
        PyOp::Map,
        PyFunction::Ref("mypkg.aug:flip".into()),
    ));
    let out = run(&def, &reg);
    assert_eq!(out.len(), 1);
    let f = failure(&out[0]);
    assert_eq!(f.phase, Phase::Load);
    assert!(f.to_string().contains("module `mypkg.aug` is not importable"), "{f}");
}

#[test]
fn a_pickle_from_another_python_is_refused_naming_both_versions() {
    let pool = pool(1);
    let f = pickle("f = lambda x: x\n");
    let mine = pool.version().to_string();
    let (major, minor) = sluice_dataset::python::parse_version(&mine).unwrap();
    let other = format!("{major}.{}.0", minor + 1);
    let err = pool.prepare(&Arc::new(f.clone()), &other).unwrap_err();
    assert_eq!(err.error_type, "VersionMismatch");
    assert!(err.message.contains(&other) && err.message.contains(&mine), "{}", err.message);
    // The same pickle with the right version loads.
    pool.prepare(&Arc::new(f), &mine).unwrap();
    // Garbage bytes: the unpickling error, named.
    let junk =
        PyFunction::Pickle(sluice_dataset::Pickled { name: "g".into(), data: vec![1, 2, 3] });
    let err = pool.prepare(&Arc::new(junk), &mine).unwrap_err();
    assert!(err.message.starts_with("cannot unpickle the function `g`"), "{}", err.message);
}

#[test]
fn a_function_that_kills_its_process_at_import_is_a_load_failure() {
    let pool = pool(1);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dies_at_import.py"), "import os\nos._exit(4)\n").unwrap();
    let mut c = config(1);
    c.env = vec![("PYTHONPATH".into(), dir.path().display().to_string())];
    drop(pool);
    let pool = Pool::start(c).unwrap();
    let f =
        pool.prepare(&Arc::new(PyFunction::Ref("dies_at_import:f".into())), "3.11").unwrap_err();
    assert_eq!(f.error_type, "ProcessDied");
    assert!(f.message.contains("loading `dies_at_import:f`") && f.message.contains("status 4"));
    assert_eq!(pool.stats().restarts, 1);
}

#[test]
fn an_interpreter_that_cannot_start_is_refused_naming_the_flag() {
    let mut c = PoolConfig::new("/nonexistent/python3");
    c.processes = 1;
    let err = Pool::start(c).err().unwrap().to_string();
    assert!(
        err.starts_with("--python /nonexistent/python3 cannot run Python stages: cannot start it"),
        "{err}"
    );
    // Something that is not Python.
    let mut c = PoolConfig::new("/bin/false");
    c.processes = 1;
    let err = Pool::start(c).err().unwrap().to_string();
    assert!(err.contains("exited with status 1 before saying hello"), "{err}");
    assert!(err.ends_with("name a Python 3 interpreter with numpy with --python"), "{err}");
    // An interpreter whose numpy does not import.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("numpy")).unwrap();
    std::fs::write(
        dir.path().join("numpy/__init__.py"),
        "raise ModuleNotFoundError(\"No module named 'numpy'\")\n",
    )
    .unwrap();
    let mut c = config(2);
    c.env = vec![("PYTHONPATH".into(), dir.path().display().to_string())];
    let err = Pool::start(c).err().unwrap();
    assert!(matches!(err, PoolError::Interpreter { .. }));
    let err = err.to_string();
    assert!(
        err.ends_with(
            "cannot run Python stages: No module named 'numpy'; install numpy there or name \
             another interpreter with --python"
        ),
        "{err}"
    );
    // Values out of range name their flag.
    let mut c = config(1);
    c.processes = 0;
    assert!(Pool::start(c).err().unwrap().to_string().contains("--python-processes 0"));
    let mut c = config(1);
    c.memory_limit_bytes = Some(1 << 20);
    assert!(Pool::start(c).err().unwrap().to_string().contains("--python-memory-limit-mb 1"));
}
