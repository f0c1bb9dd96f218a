#!/usr/bin/env bash
# The Python package's tests (part of scripts/test.sh, so of the README's test
# command and CI): makes a venv in .venv-py with pinned maturin, pytest and numpy
# from PyPI (first run only), builds the native module in debug into it with
# `maturin develop` (sharing cargo's target/), and runs pytest over python/tests.
# pytest exits 5 when it collects no test, which fails this script like any error.
# Extra arguments go to pytest, e.g. `scripts/test-python.sh -k fork`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-py
if [ ! -x "$venv/bin/maturin" ] || [ ! -x "$venv/bin/pytest" ]; then
    echo "--- creating $venv (maturin, pytest, numpy from PyPI)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
        maturin==1.16.0 pytest==9.2.0 numpy==2.4.6
fi
echo "--- building the sluice Python package (maturin develop, debug)"
(cd python && VIRTUAL_ENV="$PWD/../$venv" PATH="$PWD/../$venv/bin:$PATH" \
    maturin develop --quiet)
echo "--- pytest python/tests"
exec "$venv/bin/python" -m pytest python/tests -q -p no:cacheprovider "$@"
