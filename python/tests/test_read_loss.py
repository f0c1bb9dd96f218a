"""A read whose data was lost is told so: a worker stopped in the middle of a
``parallel_epochs`` read (its task then ended by the dispatcher's worker timeout)
raises ``DataLossError`` naming it at the end of the read, or, with
``accept_data_loss=True``, ends normally with the loss in ``loss_report``."""

from __future__ import annotations

import pytest

import sluice

N = 100_000


@pytest.fixture
def cluster():
    d = sluice.DispatchServer(worker_timeout=0.5)
    victim = sluice.WorkerServer(d.target, drain_timeout=0.0)
    other = sluice.WorkerServer(d.target, drain_timeout=0.0)
    yield d, victim
    other.stop()
    victim.stop()
    d.stop()


def read_while_a_worker_stops(d, victim, accept: bool):
    """Reads 100 elements (each worker sends all N), then stops one worker; the
    bounded reader (one outstanding message) keeps its task from finishing."""
    ds = sluice.Dataset.range(N).distribute(
        "parallel_epochs", d.target, max_outstanding_requests=1, accept_data_loss=accept
    )
    reader = ds.read()
    got = [int(reader.next(timeout=60)) for _ in range(100)]
    victim.stop()
    return reader, got


def test_a_read_that_lost_a_worker_raises_data_loss_naming_it(cluster):
    d, victim = cluster
    dead = victim.address
    reader, got = read_while_a_worker_stops(d, victim, accept=False)
    with pytest.raises(sluice.DataLossError, match="the read lost data") as e:
        for x in reader:
            got.append(int(x))
    assert dead in str(e.value)
    assert len(got) < 2 * N


def test_a_read_that_accepts_loss_ends_with_a_loss_report(cluster):
    d, victim = cluster
    dead = victim.address
    reader, got = read_while_a_worker_stops(d, victim, accept=True)
    got.extend(int(x) for x in reader)
    assert len(got) < 2 * N
    report = reader.loss_report
    assert report is not None and [w for _, w in report] == [dead], report
