"""Exactly-once reads end to end from Python, over real servers
(docs/exactly-once.md): every element once, through a worker's death, a
position restored in a new reader, two consumers' positions merged, and the
adapters' states.

A consumer that leaves with elements it received and never took (a second
``iter()`` of an adapter starts a new read) is not yet recovered: see
``pending_exactly_once_departed_reader.py`` and docs/exactly-once.md.
"""

from __future__ import annotations

from collections import Counter

import pytest

import sluice
from sluice.jax import Iterator as JaxIterator

N = 2_000


@pytest.fixture
def cluster():
    d = sluice.DispatchServer(worker_timeout=0.5)
    workers = [sluice.WorkerServer(d.target, drain_timeout=0.0) for _ in range(2)]
    yield d, workers
    for w in workers:
        w.stop()
    d.stop()


def _eo(d, job: str | None = None, **kwargs) -> sluice.DistributedDataset:
    return sluice.Dataset.range(N).distribute(
        "distributed_epoch", d.target, job_name=job, exactly_once=True, **kwargs
    )


def _once(values: list[int]) -> None:
    dup = [v for v, n in Counter(values).items() if n > 1]
    assert not dup, f"delivered twice: {dup[:10]}"
    assert sorted(values) == list(range(N)), f"missing: {sorted(set(range(N)) - set(values))[:10]}"


def test_an_exactly_once_read_delivers_every_element_once(cluster):
    d, _ = cluster
    reader = _eo(d).read()
    assert reader.delivery == "exactly_once"
    _once([int(x) for x in reader])


def test_a_pipeline_that_cannot_be_replayed_is_refused_naming_the_stage(cluster):
    d, _ = cluster
    ds = sluice.Dataset.range(N).take(10).distribute("dynamic", d.target, exactly_once=True)
    with pytest.raises(sluice.FailedPreconditionError, match="take"):
        ds.read()


def test_a_worker_death_loses_and_repeats_nothing(cluster):
    d, workers = cluster
    reader = _eo(d, max_outstanding_requests=1).read()
    got = [int(reader.next(timeout=60)) for _ in range(100)]
    workers[0].stop()
    got.extend(int(x) for x in reader)  # no DataLossError: the task's records come again
    assert reader.loss_report is None
    _once(got)


def test_a_position_restores_everything_not_consumed_once(cluster):
    d, _ = cluster
    first = _eo(d, "restore-one").read()
    got = [int(first.next(timeout=60)) for _ in range(300)]
    pos = first.position()
    first.close()  # what it held beyond the position is not lost
    restored = _eo(d, "restore-one").read(restore_from=pos)
    got.extend(int(x) for x in restored)
    _once(got)


def test_the_jax_iterator_state_restores_the_epoch_once(cluster):
    d, _ = cluster
    it = JaxIterator(_eo(d, "jax-eo"))
    got = [int(next(it)) for _ in range(250)]
    state = it.get_state()
    assert state["position"], state
    it.close()
    again = JaxIterator(_eo(d, "jax-eo"))
    again.set_state(state)
    got.extend(int(x) for x in again)
    _once(got)
