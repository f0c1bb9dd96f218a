#!/usr/bin/env bash
# Creates or updates the benchmark venv `.venv-bench`: the peers `sluice bench`
# measures Sluice against in its `jpeg` section (bench/pillow_baseline.py):
# pinned Pillow (libjpeg-turbo inside its wheel) and numpy from PyPI. Not used by
# the tests or CI. Prints the interpreter's path (for `sluice bench --pillow-python`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-bench
pins=(pillow==13.0.0 numpy==2.4.6)
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import PIL, numpy; assert PIL.__version__ == "13.0.0" and numpy.__version__ == "2.4.6"' 2>/dev/null; then
    "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi
echo "$PWD/$venv/bin/python"
