"""Fixtures: real servers in this process (the same Rust servers `sluice
dispatcher` and `sluice worker` run), on loopback with free ports, stopped when
the tests that use them are done."""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Iterator

import pytest

import sluice


def wait_until(what: str, cond: Callable[[], bool], deadline_s: float = 60.0) -> None:
    """Waits for `cond` (polling), failing the test with `what` after the deadline:
    a condition with a deadline, never a sleep standing in for synchronisation."""
    deadline = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.02)


class Service:
    """A dispatcher and `n` workers (each made with `worker_args`)."""

    def __init__(
        self,
        workers: int = 2,
        worker_args: dict[str, object] | None = None,
        **dispatcher_args: object,
    ) -> None:
        self.dispatcher = sluice.DispatchServer(**dispatcher_args)  # type: ignore[arg-type]
        self.workers = [
            sluice.WorkerServer(self.dispatcher.target, **(worker_args or {}))  # type: ignore[arg-type]
            for _ in range(workers)
        ]

    @property
    def target(self) -> str:
        return self.dispatcher.target

    def wait_for_workers(self) -> None:
        """Waits until every worker registered (a WorkerServer registers in the
        background after it starts)."""
        client = sluice._native.Client([self.target])
        want = {w.address for w in self.workers}

        def registered() -> bool:
            status = json.loads(client.status_json())
            return want <= {w["address"] for w in status["workers"]}

        wait_until(f"{len(want)} registered workers", registered)

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.dispatcher.stop()


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    """One dispatcher and two workers shared by a module's tests."""
    s = Service(workers=2)
    yield s
    s.stop()


@pytest.fixture
def fresh_service() -> Iterator[Service]:
    """A dispatcher and two workers for one test."""
    s = Service(workers=2)
    yield s
    s.stop()


@pytest.fixture
def eo_cluster():
    """A dispatcher that declares a worker lost after 0.5 s and two workers that
    stop at once (no drain): for reads through a worker's death."""
    d = sluice.DispatchServer(worker_timeout=0.5)
    workers = [sluice.WorkerServer(d.target, drain_timeout=0.0) for _ in range(2)]
    yield d, workers
    for w in workers:
        w.stop()
    d.stop()


def in_threads(reads, deadline_s: float = 240.0) -> list[int]:
    """Runs `reads` at once in daemon threads and returns what they read, all
    together; fails if one has not ended by the deadline (a read that waits for
    records nobody will deliver must fail the test, not hang it)."""
    results: list[list[int]] = [[] for _ in reads]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = reads[i]()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(reads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(deadline_s)
        assert not t.is_alive(), f"a read did not end within {deadline_s} s"
    assert not errors, errors
    return [v for r in results for v in r]
