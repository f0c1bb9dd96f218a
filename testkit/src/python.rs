//! The Python interpreter tests run (the Python pool's tests need one with numpy
//! and cloudpickle): `SLUICE_TEST_PYTHON`, else the workspace's `.venv-py`, which
//! `scripts/install-python-venv.sh` makes (scripts/test.sh runs it first).

use std::path::PathBuf;

/// The interpreter for tests; panics with the command that installs it.
pub fn interpreter() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_TEST_PYTHON").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.exists(), "SLUICE_TEST_PYTHON={} does not exist", p.display());
        return p;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".venv-py/bin/python");
    assert!(
        venv.exists(),
        "no Python for the tests: run `bash scripts/install-python-venv.sh` in {} (it makes \
         .venv-py with numpy and cloudpickle), or set SLUICE_TEST_PYTHON to an interpreter \
         that has both",
        root.display()
    );
    venv
}
