"""``python -m sluice.bench python_stages``: what running the user's Python on the
workers costs (docs/python-stages.md, "Figures").

The service (a dispatcher and one worker that runs Python stages) runs in a
separate process, restarted for each ``--python-processes`` setting. Cases:

- **overhead of a Python map**: ``range(n)`` through a Python ``map`` returning its
  input, against the built-in Rust ``map("identity")``, read to the end by the Rust
  client (``sluice._native.rust_read``: counted, never converted); the difference
  per element is what the Python stage adds (the trip to a Python process and
  back, in chunks of 64 elements);
- **map_batches**: the same with ``map_batches(fn, 1024)``, the batch stacked into
  one array per call;
- **scaling with Python processes**: a CPU-bound Python ``map`` (about 20 µs of
  pure Python per element) with one and then two processes per worker;
- **the tokenizer example** (examples/text_tokens.py: text lines → a Python
  tokenizer in ``map`` → packing in ``map_batches`` → int32 batches) in tokens/s,
  read by a Python loop, against the same tokenizer and packing in a PyTorch
  ``DataLoader(num_workers=2)`` on the reader's host. The DataLoader runs under
  ``--torch-python`` (an interpreter with torch; this one if torch imports), with
  this package and the examples directory on its path.

Build the module in release (``maturin develop --release``) for meaningful figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from types import ModuleType
from typing import Any

import sluice
from sluice import _native

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _serve(python_processes: int, ready: Any, stop: Any) -> None:
    """The service process: a dispatcher and a Python-running worker until `stop`."""
    with sluice.DispatchServer() as d, sluice.WorkerServer(
        d.target, allow_python=True, python_processes=python_processes
    ):
        ready.put(d.address)
        stop.wait()


class Service:
    """A service process with `python_processes` Python processes on its worker."""

    def __init__(self, python_processes: int) -> None:
        ctx = mp.get_context("spawn")
        self.ready, self.stop_event = ctx.Queue(), ctx.Event()
        self.process = ctx.Process(
            target=_serve, args=(python_processes, self.ready, self.stop_event), daemon=True
        )

    def __enter__(self) -> str:
        self.process.start()
        address: str = self.ready.get(timeout=120)
        return address

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.process.join(timeout=60)


def rust_seconds(address: str, ds: sluice.Dataset, expected: int, repeat: int) -> float:
    """The best of `repeat` reads to the end by the Rust client, in seconds."""
    dataset_id = sluice.register_dataset(address, ds)
    best = float("inf")
    for _ in range(repeat):
        elements, _, seconds = _native.rust_read([address], dataset_id, "off")
        assert elements == expected, (elements, expected)
        best = min(best, seconds)
    return best


def busy(x: Any) -> Any:
    """About 20 µs of pure Python per element (imported by reference on the worker)."""
    total = 0
    for i in range(400):
        total += i * i
    return x + (total & 1)


def overhead(address: str, n: int, repeat: int) -> None:
    base = sluice.Dataset.range(n)
    rust = rust_seconds(address, base.map("identity"), n, repeat)
    py_map = rust_seconds(address, base.map(lambda x: x), n, repeat)
    batches = rust_seconds(address, base.map_batches(lambda b: b, 1024), n, repeat)
    print(f"{n:,} int64 scalars, 1 worker, 1 Python process:")
    print(f"  Rust map('identity')          {n / rust:12,.0f} el/s")
    print(
        f"  Python map(lambda x: x)       {n / py_map:12,.0f} el/s  "
        f"overhead {(py_map - rust) / n * 1e6:6.2f} µs/element"
    )
    print(
        f"  Python map_batches(.., 1024)  {n / batches:12,.0f} el/s  "
        f"overhead {(batches - rust) / n * 1e6:6.2f} µs/element",
        flush=True,
    )


def scaling(processes: int, n: int, repeat: int) -> float:
    with Service(processes) as address:
        ds = sluice.Dataset.range(n).map(busy, num_parallel_calls=sluice.AUTOTUNE)
        return n / rust_seconds(address, ds, n, repeat)


def load_example() -> ModuleType:
    """examples/text_tokens.py as the module ``text_tokens`` (its functions then
    travel by value: the workers need not import it)."""
    spec = importlib.util.spec_from_file_location("text_tokens", EXAMPLES / "text_tokens.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no examples/text_tokens.py beside the package ({EXAMPLES})")
    module = importlib.util.module_from_spec(spec)
    sys.modules["text_tokens"] = module
    spec.loader.exec_module(module)
    return module


def sluice_tokens_per_second(address: str, files: list[str], repeat: int) -> float:
    tt = load_example()
    tok = tt.WordTokenizer.fit(line for f in files for line in open(f, encoding="utf-8"))
    dataset_id = sluice.register_dataset(address, tt.pipeline(files, tok))
    best = 0.0
    for _ in range(repeat):
        started, tokens = time.perf_counter(), 0
        for batch in sluice.from_dataset_id("off", address, dataset_id):
            tokens += batch.size
        best = max(best, tokens / (time.perf_counter() - started))
    return best


def torch_tokens_per_second(python: str, files: list[str], repeat: int) -> float:
    """Runs ``sluice._bench_torch`` under `python` (with torch); its tokens/s. Only
    this package (a link to it) and the examples go on that interpreter's path, not
    this interpreter's other packages."""
    with tempfile.TemporaryDirectory() as path:
        os.symlink(pathlib.Path(__file__).resolve().parent, pathlib.Path(path) / "sluice")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([path, str(EXAMPLES)])
        out = subprocess.run(
            [python, "-m", "sluice._bench_torch", str(repeat), *files],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
    if out.returncode != 0:
        raise RuntimeError(f"the DataLoader run failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["tokens_per_second"])


def torch_python(given: str | None) -> str | None:
    if given:
        return given
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    return os.environ.get("SLUICE_TORCH_PYTHON")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sluice.bench python_stages", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every case's size")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is printed")
    parser.add_argument(
        "--torch-python",
        help="a Python with torch for the DataLoader comparison (default: this one if "
        "torch imports, else $SLUICE_TORCH_PYTHON; neither: the comparison is skipped)",
    )
    args = parser.parse_args(argv)
    if "debug" in _native.build_profile():
        print(
            "warning: sluice._native is a debug build; figures are not meaningful "
            "(maturin develop --release)",
            file=sys.stderr,
        )
    n = int(200_000 * args.scale)
    with Service(1) as address:
        overhead(address, n, args.repeat)
    busy_n = int(50_000 * args.scale)
    one, two = (scaling(p, busy_n, args.repeat) for p in (1, 2))
    print(f"CPU-bound Python map (~20 µs/element), {busy_n:,} elements, 1 worker:")
    print(f"  --python-processes 1  {one:10,.0f} el/s")
    print(f"  --python-processes 2  {two:10,.0f} el/s  ({two / one:.2f}x)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tt = load_example()
        files = tt.write_corpus(pathlib.Path(tmp), files=4, lines=int(5_000 * args.scale))
        with Service(2) as address:
            remote = sluice_tokens_per_second(address, files, args.repeat)
        print(f"tokenizer example ({len(files)} files): text -> tokens -> packed token batches")
        print(f"  Sluice, 1 worker, --python-processes 2   {remote:12,.0f} tokens/s")
        python = torch_python(args.torch_python)
        if python is None:
            print("  PyTorch DataLoader: skipped (no torch here; give --torch-python)")
        else:
            local = torch_tokens_per_second(python, files, args.repeat)
            print(
                f"  PyTorch DataLoader(num_workers=2)        {local:12,.0f} tokens/s "
                f"(Sluice/DataLoader {remote / local:.2f})"
            )
    return 0

if __name__ == "__main__":
    sys.exit(main())
