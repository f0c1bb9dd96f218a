#!/usr/bin/env bash
# Creates or updates the test venv `.venv-py` (the Python package's tests, and the
# Rust tests of the worker's Python pool, `sluice-pyexec`, which run its
# interpreter): pinned maturin, pytest, numpy, cloudpickle and pyarrow (the
# Parquet tests write their tables with it, as most tools do) from PyPI.
# Idempotent and fast when the venv already holds these versions (one `python -c`
# check, no pip call). Called by scripts/test.sh (before `cargo test`) and
# scripts/test-python.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-py
pins=(maturin==1.16.0 pytest==9.2.0 numpy==2.4.6 cloudpickle==3.1.2 pyarrow==22.0.0)
# The check compares installed distributions with the pins above.
have_all() {
    [ -x "$venv/bin/python" ] && [ -x "$venv/bin/maturin" ] || return 1
    "$venv/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
}
if have_all; then
    exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
    echo "--- creating $venv"
    python3 -m venv "$venv"
fi
echo "--- installing ${pins[*]} into $venv (PyPI)"
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
have_all || { echo "error: $venv still lacks one of ${pins[*]}" >&2; exit 1; }
