"""Deterministic order from Python, over real servers (docs/exactly-once.md,
"Deterministic order"): with ``deterministic=True``, a ``seed`` and
``num_consumers``, consumer ``consumer_index``'s sequence is the same whatever
the number of workers, and another seed gives another one; together the
consumers get every element once. Pipelines that mix splits, reads without
exactly-once and a consumer index out of range are refused."""

from __future__ import annotations

import threading

import pytest

import sluice

N = 400


def _cluster(workers: int):
    d = sluice.DispatchServer(elements_per_split=4)
    ws = [sluice.WorkerServer(d.target, drain_timeout=0.0) for _ in range(workers)]
    return d, ws


def _stop(d, ws) -> None:
    for w in ws:
        w.stop()
    d.stop()


def _read_both(d, job: str, seed: int) -> list[list[int]]:
    """Both consumers of ``job``, read side by side (each in its own thread)."""
    out: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def consume(i: int) -> None:
        try:
            ds = sluice.Dataset.range(N).distribute(
                "distributed_epoch",
                d.target,
                job_name=job,
                exactly_once=True,
                deterministic=True,
                seed=seed,
                num_consumers=2,
                consumer_index=i,
                max_outstanding_requests=1,
            )
            out[i] = [int(x) for x in ds]
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a consumer did not finish"
    return out


def test_each_consumers_sequence_depends_on_the_seed_not_on_the_workers():
    d, ws = _cluster(1)
    try:
        one = _read_both(d, "det-one", 42)
    finally:
        _stop(d, ws)
    d, ws = _cluster(3)
    try:
        three = _read_both(d, "det-three", 42)
        other = _read_both(d, "det-other", 43)
    finally:
        _stop(d, ws)
    assert one == three
    assert one[0] != other[0]
    assert sorted(one[0] + one[1]) == list(range(N))
    assert one[0] + one[1] != list(range(N))


def test_refusals_name_what_to_change():
    d, ws = _cluster(1)
    try:
        kw = dict(job_name="det-refused", exactly_once=True, deterministic=True, seed=1,
                  num_consumers=2, consumer_index=0)
        shuffled = sluice.Dataset.range(10).shuffle(4, seed=1)
        with pytest.raises(sluice.FailedPreconditionError, match=r"stages\[1\]\.shuffle"):
            shuffled.distribute("distributed_epoch", d.target, **kw).read()
        plain = dict(kw, exactly_once=False)
        with pytest.raises(sluice.InvalidArgumentError, match="exactly_once"):
            sluice.Dataset.range(10).distribute("distributed_epoch", d.target, **plain).read()
        wrong = dict(kw, consumer_index=2)
        with pytest.raises(sluice.InvalidArgumentError, match="consumer_index=2"):
            sluice.Dataset.range(10).distribute("distributed_epoch", d.target, **wrong).read()
        with pytest.raises(sluice.InvalidArgumentError, match="num_consumers and consumer_index"):
            sluice.Dataset.range(10).distribute(
                "distributed_epoch", d.target, job_name="x", exactly_once=True, deterministic=True
            )
    finally:
        _stop(d, ws)
