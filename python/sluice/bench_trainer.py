"""``python -m sluice.bench trainer``: what a 1 MiB element costs the trainer's
process from Python, beside tf.data service doing the same in the same
interpreter and run (issue 33, "lean trainer").

Each service runs as processes beside this one (a dispatcher and ``--workers``
workers); this process reads one 1 MiB uint8 element repeated N times in
processing mode OFF (tf.data's "parallel_epochs": every worker streams all N)
with ``for element in dataset``, touching each element as a trainer handing it
to PyTorch or JAX would (a numpy array: ``element.nbytes``; tf.data's tensors
through ``.numpy()``). Printed per service: elements/s and this process's CPU
per element (``time.process_time``: the client's threads and the loop), beside
the issue's targets (Sluice ≤ 150 µs of trainer CPU per element, ≥ 4× tf.data
service's rate) and the limits measured in the same run: receiving the same
bytes from another process over loopback TCP into one reused buffer (what any
trainer fed over the network pays the kernel), and one memcpy of 1 MiB
(``numpy.copyto``). tf.data service is measured when ``tensorflow`` imports,
else its row says so. Best of ``--repeat`` reads; a release build of the module
for meaningful figures.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

import numpy as np

import sluice
from sluice.bench import _serve, service_process
from sluice.bench_dynamic import _quiet_tf, _tf_service

ELEMENT_BYTES = 1 << 20
TARGET_CPU_US = 150.0
TARGET_RATIO = 4.0


def _read(iterate: Any, to_numpy: Any) -> tuple[int, float, float]:
    """(elements, seconds, CPU seconds of this process) of one read to the end."""
    cpu, started = time.process_time(), time.perf_counter()
    n = 0
    for element in iterate():
        n += to_numpy(element).nbytes // ELEMENT_BYTES
    return n, time.perf_counter() - started, time.process_time() - cpu


def _best(reads: list[tuple[int, float, float]], expected: int) -> tuple[float, float]:
    """(elements/s, CPU µs per element) of the fastest read."""
    for got, _, _ in reads:
        assert got == expected, f"read {got} of {expected} elements"
    got, seconds, cpu = max(reads, key=lambda r: r[0] / r[1])
    return got / seconds, cpu / got * 1e6


def measure_sluice(ctx: Any, workers: int, n: int, repeat: int) -> tuple[float, float]:
    with service_process(ctx, _serve, workers) as (address, _):
        one = np.zeros(ELEMENT_BYTES, np.uint8)
        dataset_id = sluice.register_dataset(address, sluice.Dataset.from_tensor_slices(one[None]).repeat(n))
        reads = [
            _read(lambda: sluice.from_dataset_id("off", address, dataset_id), lambda e: e)
            for _ in range(repeat)
        ]
        return _best(reads, n * workers)


def measure_tf(ctx: Any, workers: int, n: int, repeat: int) -> tuple[float, float] | None:
    _quiet_tf()
    try:
        import tensorflow as tf
    except ImportError:
        return None
    with service_process(ctx, _tf_service, workers, timeout=300) as (target, _):
        one = np.zeros(ELEMENT_BYTES, np.uint8)
        distribute = tf.data.experimental.service.distribute("parallel_epochs", target)
        ds = tf.data.Dataset.from_tensors(one).repeat(n).apply(distribute)
        reads = [_read(lambda: ds, lambda e: e.numpy()) for _ in range(repeat)]
        return _best(reads, n * workers)


def _send(port: int, count: int) -> None:
    """Sends `count` elements' bytes to 127.0.0.1:`port`."""
    import socket

    payload = bytes(ELEMENT_BYTES)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(count):
            sock.sendall(payload)


def loopback_receive(ctx: Any, count: int, repeat: int) -> tuple[float, float]:
    """(elements/s, this process's CPU µs per element) of receiving `count`
    elements' bytes from another process over loopback TCP into one reused
    buffer (``recv_into``): the least a trainer on this host pays to receive an
    element from a worker (best of `repeat`)."""
    import socket

    best = (0.0, float("inf"))
    for _ in range(repeat):
        with socket.create_server(("127.0.0.1", 0)) as server:
            sender = ctx.Process(target=_send, args=(server.getsockname()[1], count), daemon=True)
            sender.start()
            conn, _ = server.accept()
            with conn:
                buf = memoryview(bytearray(ELEMENT_BYTES))
                cpu, started = time.process_time(), time.perf_counter()
                left = count * ELEMENT_BYTES
                while left:
                    n = conn.recv_into(buf, min(left, ELEMENT_BYTES))
                    assert n, "the sender closed early"
                    left -= n
                seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            sender.join(timeout=60)
        if count / seconds > best[0]:
            best = (count / seconds, cpu / count * 1e6)
    return best


def memcpy_us(repeat: int = 200) -> float:
    """One memcpy of an element's bytes, µs (best of `repeat`): the limit."""
    src, dst = np.ones(ELEMENT_BYTES, np.uint8), np.empty(ELEMENT_BYTES, np.uint8)
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def main(argv: list[str]) -> int:
    from sluice.bench import service_arguments, warn_if_debug

    parser = service_arguments("python -m sluice.bench trainer", __doc__)
    parser.add_argument("--elements", type=int, default=2_000, help="elements per worker (default 2,000)")
    args = parser.parse_args(argv)
    warn_if_debug()
    ctx = mp.get_context("spawn")
    rate, cpu_us = measure_sluice(ctx, args.workers, args.elements, args.repeat)
    tf = measure_tf(ctx, args.workers, args.elements, args.repeat)
    copy = memcpy_us()
    wire_rate, wire_cpu = loopback_receive(ctx, args.elements * args.workers, args.repeat)
    print(f"1 MiB elements (uint8), mode OFF, {args.workers} workers, from Python")
    print(f"{'service':22} {'elements/s':>12} {'trainer CPU us/el':>18} {'target':>30}")
    met = "met" if cpu_us <= TARGET_CPU_US else "UNMET"
    print(f"{'Sluice':22} {rate:12,.0f} {cpu_us:18.1f} {f'<= {TARGET_CPU_US:g} us/el ({met})':>30}")
    if tf is None:
        print(f"{'tf.data service':22} {'not measured: tensorflow does not import':>40}")
    else:
        tf_rate, tf_cpu = tf
        print(f"{'tf.data service':22} {tf_rate:12,.0f} {tf_cpu:18.1f}")
        ratio = rate / tf_rate
        met = "met" if ratio >= TARGET_RATIO else "UNMET"
        print(f"{'Sluice / tf.data':22} {ratio:11.1f}x {'':>18} {f'>= {TARGET_RATIO:g}x ({met})':>30}")
    print(f"{'limit: loopback recv':22} {wire_rate:12,.0f} {wire_cpu:18.1f}")
    print(f"{'limit: memcpy of 1 MiB':22} {1e6 / copy:12,.0f} {copy:18.1f}")
    return 0
