#!/usr/bin/env bash
# The project's test command (README and .ci/run): installs the S3-compatible test
# server (moto, from PyPI, into .venv-s3), strace and chromium (Debian; chromium
# loads the dispatcher's status page in tests/status_page.rs) and the test venv
# (.venv-py: numpy, cloudpickle, pyarrow, maturin, pytest) if they are missing, runs every
# Rust test,
# then the Python package's tests (scripts/test-python.sh: a venv in .venv-py,
# the module built by maturin, pytest).
# Extra arguments go to `cargo test`, e.g. `scripts/test.sh --test quorum`; with
# SLUICE_PYTHON_TESTS=0 the Python tests are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-s3-test-server.sh
bash scripts/install-strace.sh
bash scripts/install-chromium.sh
# The Python pool's tests (sluice-pyexec) run real Python processes: numpy and
# cloudpickle in .venv-py, found through SLUICE_TEST_PYTHON.
bash scripts/install-python-venv.sh
export SLUICE_TEST_PYTHON="$PWD/.venv-py/bin/python"
cargo test --workspace "$@"
if [ "${SLUICE_PYTHON_TESTS:-1}" != 0 ]; then
    bash scripts/test-python.sh
fi
