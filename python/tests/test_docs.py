"""The training loop in docs/python.md runs as written and learns its line."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_the_training_loop_in_the_docs_runs():
    section = DOC.read_text().split("## A training loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code, "docs/python.md has a ```python block under '## A training loop'"
    out = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "learned y = 3.00x + 2.00" in out.stdout, out.stdout
    assert "a checkpoint in epoch 1 of job jax-" in out.stdout, out.stdout
