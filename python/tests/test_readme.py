"""The README's Python quickstart runs as written and prints what it says."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_quickstart_runs():
    text = README.read_text()
    section = text.split("## From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code, "README has a ```python block under '## From Python'"
    out = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert sorted(int(line) for line in out.stdout.split()) == [i * i for i in range(10)]
