"""``python -m sluice.bench``: what a trainer's Python loop gets from Sluice, next to
what the Rust client gets from the same service in the same run.

The service (a dispatcher and ``--workers`` workers) runs in a separate process, so
the CPU time measured here is the trainer process's own: the client's runtime
threads plus the Python loop. Each case registers one dataset and reads it twice to
the end with processing mode OFF (every worker streams the whole dataset): once in
Rust (``sluice._native.rust_read``: elements counted, never converted) and once in
Python (``for element in dataset``: each element a numpy array over the received
bytes). Build the module in release for meaningful figures
(``maturin develop --release``); a debug build prints a warning.

Cases: int64 scalars one by one; 1024 × int64 batches; 224×224×3 uint8 images;
1 MiB elements.

``python -m sluice.bench python_stages`` measures Python stages instead (the
user's functions on the workers; ``sluice.bench_python``), and ``python -m
sluice.bench dynamic`` DYNAMIC reads of one-element splits beside tf.data service
(``sluice.bench_dynamic``), and ``python -m sluice.bench trainer`` what a 1 MiB
element costs the trainer beside tf.data service (``sluice.bench_trainer``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

import sluice
from sluice import _native


def _serve(workers: int, ready: Any, stop: Any) -> None:
    """The service process: a dispatcher and `workers` workers until `stop`."""
    with sluice.DispatchServer() as d:
        servers = [sluice.WorkerServer(d.target) for _ in range(workers)]
        ready.put(d.address)
        stop.wait()
        for w in servers:
            w.stop()


@contextlib.contextmanager
def service_process(ctx: Any, target: Callable[..., None], *args: Any, timeout: float = 120) -> Iterator[tuple[Any, Any]]:
    """Runs ``target(*args, ready, stop)`` in a process of `ctx`; yields what it
    put in ``ready`` (an address) and the process; sets ``stop`` and joins it on
    the way out. Every bench's services start this way."""
    ready, stop = ctx.Queue(), ctx.Event()
    process = ctx.Process(target=target, args=(*args, ready, stop), daemon=True)
    process.start()
    try:
        yield ready.get(timeout=timeout), process
    finally:
        stop.set()
        process.join(timeout=60)


@dataclass
class Case:
    name: str
    dataset: Callable[[int], sluice.Dataset]
    count: int  # elements of the dataset (each worker streams all of them)


def cases(scale: float) -> list[Case]:
    def repeated(array: np.ndarray) -> Callable[[int], sluice.Dataset]:
        return lambda n: sluice.Dataset.from_tensor_slices(array[None]).repeat(n)

    return [
        Case("scalars (int64, one by one)", lambda n: sluice.Dataset.range(n), int(500_000 * scale)),
        Case("batches of 1024 x int64", repeated(np.arange(1024, dtype=np.int64)), int(100_000 * scale)),
        Case("images 224x224x3 uint8", repeated(np.zeros((224, 224, 3), np.uint8)), int(10_000 * scale)),
        Case("1 MiB elements", repeated(np.zeros(1 << 20, np.uint8)), int(1_500 * scale)),
    ]


@dataclass
class Figure:
    elements: int
    bytes: int
    seconds: float
    cpu_seconds: float

    @property
    def per_second(self) -> float:
        return self.elements / self.seconds

    @property
    def gb_per_second(self) -> float:
        return self.bytes / self.seconds / 1e9

    @property
    def cpu_us_per_element(self) -> float:
        return self.cpu_seconds / self.elements * 1e6


def read_rust(address: str, dataset_id: str) -> Figure:
    cpu = time.process_time()
    elements, nbytes, seconds = _native.rust_read([address], dataset_id, "off")
    return Figure(elements, nbytes, seconds, time.process_time() - cpu)


def read_python(address: str, dataset_id: str) -> Figure:
    reader = sluice.from_dataset_id("off", address, dataset_id)
    cpu = time.process_time()
    started = time.perf_counter()
    elements = nbytes = 0
    for element in reader:
        elements += 1
        nbytes += element.nbytes  # touch each element as a trainer would
    seconds = time.perf_counter() - started
    return Figure(elements, nbytes, seconds, time.process_time() - cpu)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["python_stages"]:
        from sluice.bench_python import main as python_stages

        return python_stages(argv[1:])
    if argv[:1] == ["dynamic"]:
        from sluice.bench_dynamic import main as dynamic

        return dynamic(argv[1:])
    if argv[:1] == ["trainer"]:
        from sluice.bench_trainer import main as trainer

        return trainer(argv[1:])
    parser = service_arguments("python -m sluice.bench", __doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every case's size")
    args = parser.parse_args(argv)
    warn_if_debug()
    ctx = mp.get_context("spawn")
    with service_process(ctx, _serve, args.workers) as (address, _):
        for case in cases(args.scale):
            dataset_id = sluice.register_dataset(address, case.dataset(case.count))
            rust = max((read_rust(address, dataset_id) for _ in range(args.repeat)), key=lambda f: f.per_second)
            py = max((read_python(address, dataset_id) for _ in range(args.repeat)), key=lambda f: f.per_second)
            assert py.elements == rust.elements == case.count * args.workers, (py, rust)
            print_row(case.name, py, rust)
    return 0


def service_arguments(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A bench's parser with what every one takes: --workers, --repeat."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker servers (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best is printed")
    return parser


def warn_if_debug() -> None:
    """Figures of a debug build of the module mean nothing: say so."""
    if "debug" in _native.build_profile():
        print("warning: sluice._native is a debug build; figures are not meaningful "
              "(maturin develop --release)", file=sys.stderr)


def print_row(name: str, py: Figure, rust: Figure) -> None:
    if not getattr(print_row, "header", False):
        print(f"{'case':30} {'Python el/s':>12} {'Rust el/s':>12} {'Py/Rust':>8} "
              f"{'Py GB/s':>8} {'Rust GB/s':>9} {'Py CPU us/el':>12} {'Rust CPU us/el':>14}")
        print_row.header = True  # type: ignore[attr-defined]
    print(f"{name:30} {py.per_second:12,.0f} {rust.per_second:12,.0f} {py.per_second / rust.per_second:8.2f} "
          f"{py.gb_per_second:8.2f} {rust.gb_per_second:9.2f} {py.cpu_us_per_element:12.2f} "
          f"{rust.cpu_us_per_element:14.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
