"""``python -m sluice.bench dynamic``: DYNAMIC reads of one-element splits at the
default settings, from a Python loop, beside tf.data service doing the same in the
same interpreter and run (issue 33).

Each service runs as processes beside this one: a dispatcher, and a process with
``--workers`` workers; the reader here loops ``for element in dataset`` over
``range(N)`` in processing mode DYNAMIC (tf.data's "distributed_epoch"), one
element per split (tf.data's range hands out one element per split too). Printed
per service: elements/s, and for Sluice the dispatcher process's CPU per delivered
element (read from ``/proc``), beside the issue's targets: Sluice ≥ 50× tf.data
service's rate, dispatcher CPU ≤ 10 µs per element. tf.data service is measured
when ``tensorflow`` imports (``pip install tensorflow-cpu``), else its row says so.
Best of ``--repeat`` reads; a release build of the module
(``maturin develop --release``) for meaningful figures.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any, Callable

import sluice
from sluice.bench import service_process

TARGET_RATIO = 50.0
TARGET_DISPATCHER_US = 10.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid` so far (Linux: /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sluice_dispatcher(ready: Any, stop: Any) -> None:
    with sluice.DispatchServer(elements_per_split=1) as d:
        ready.put(d.address)
        stop.wait()


def _sluice_workers(address: str, workers: int, ready: Any, stop: Any) -> None:
    servers = [sluice.WorkerServer(address) for _ in range(workers)]
    ready.put(None)
    stop.wait()
    for w in servers:
        w.stop()


def _quiet_tf() -> None:
    """TensorFlow's C++ log lines (INFO and WARNING) would bury the table."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _tf_service(workers: int, ready: Any, stop: Any) -> None:
    _quiet_tf()
    import tensorflow as tf

    service = tf.data.experimental.service
    d = service.DispatchServer()
    address = d.target.split("://", 1)[1]
    servers = [service.WorkerServer(service.WorkerConfig(dispatcher_address=address)) for _ in range(workers)]
    ready.put(d.target)
    stop.wait()
    del servers


def _timed(read: Callable[[], int]) -> tuple[int, float]:
    started = time.perf_counter()
    n = read()
    return n, time.perf_counter() - started


def measure_sluice(ctx: Any, workers: int, n: int, repeat: int) -> tuple[float, float]:
    """(elements/s, dispatcher CPU µs per element) of the best read."""
    best = (0.0, 0.0)
    with (
        service_process(ctx, _sluice_dispatcher) as (address, dispatcher),
        service_process(ctx, _sluice_workers, address, workers),
    ):
        for i in range(repeat):
            dataset = sluice.Dataset.range(n)
            cpu = _cpu_seconds(dispatcher.pid)
            got, seconds = _timed(lambda: sum(1 for _ in dataset.distribute("distributed_epoch", address, job_name=f"bench-{i}")))
            dispatcher_us = (_cpu_seconds(dispatcher.pid) - cpu) / max(got, 1) * 1e6
            assert got == n, f"read {got} of {n} elements"
            if n / seconds > best[0]:
                best = (n / seconds, dispatcher_us)
    return best


def measure_tf(ctx: Any, workers: int, n: int, repeat: int) -> float | None:
    """Elements/s of tf.data service's best read, or None without tensorflow."""
    _quiet_tf()
    try:
        import tensorflow as tf
    except ImportError:
        return None
    best = 0.0
    with service_process(ctx, _tf_service, workers, timeout=300) as (target, _):
        for i in range(repeat):
            ds = tf.data.Dataset.range(n).apply(
                tf.data.experimental.service.distribute("distributed_epoch", target, job_name=f"bench-{i}")
            )
            got, seconds = _timed(lambda: sum(1 for _ in ds))
            assert got == n, f"tf.data service read {got} of {n} elements"
            best = max(best, n / seconds)
    return best


def main(argv: list[str]) -> int:
    from sluice.bench import service_arguments, warn_if_debug

    parser = service_arguments("python -m sluice.bench dynamic", __doc__)
    parser.add_argument("--elements", type=int, default=200_000, help="elements Sluice reads (default 200,000)")
    parser.add_argument("--tf-elements", type=int, default=5_000, help="elements tf.data service reads (default 5,000)")
    args = parser.parse_args(argv)
    warn_if_debug()
    ctx = mp.get_context("spawn")
    rate, dispatcher_us = measure_sluice(ctx, args.workers, args.elements, args.repeat)
    tf_rate = measure_tf(ctx, args.workers, args.tf_elements, args.repeat)
    print(f"DYNAMIC, one-element splits, default settings, {args.workers} workers, from Python")
    print(f"{'service':22} {'elements/s':>12} {'dispatcher CPU us/el':>21} {'target':>28}")
    print(f"{'Sluice':22} {rate:12,.0f} {dispatcher_us:21.2f} "
          f"{f'<= {TARGET_DISPATCHER_US:g} us/el dispatcher':>28}")
    if tf_rate is None:
        print(f"{'tf.data service':22} {'not measured: tensorflow does not import':>40}")
    else:
        print(f"{'tf.data service':22} {tf_rate:12,.0f} {'':>21} {'':>28}")
        ratio = rate / tf_rate
        met = "met" if ratio >= TARGET_RATIO else "UNMET"
        print(f"{'Sluice / tf.data':22} {ratio:11.1f}x {'':>21} {f'>= {TARGET_RATIO:g}x ({met})':>28}")
    return 0
