#!/usr/bin/env bash
# The Python package's tests (part of scripts/test.sh, so of the README's test
# command and CI): makes or updates the venv .venv-py with pinned maturin, pytest,
# numpy and cloudpickle (scripts/install-python-venv.sh), builds the native module
# in debug into it with `maturin develop` (sharing cargo's target/), and runs
# pytest over python/tests.
# pytest exits 5 when it collects no test, which fails this script like any error.
# Extra arguments go to pytest, e.g. `scripts/test-python.sh -k fork`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-py
bash scripts/install-python-venv.sh
echo "--- building the sluice Python package (maturin develop, debug)"
(cd python && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" \
    maturin develop --quiet)
echo "--- pytest python/tests"
exec "$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider "$@"
