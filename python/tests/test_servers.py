"""Servers started from Python: a dispatcher journaling to a work_dir survives a
restart, a quorum serves reads, join/stop behave."""

from __future__ import annotations

import threading

import pytest

import sluice


def ints(elements) -> list[int]:
    return sorted(int(e) for e in elements)


def test_a_dispatcher_with_a_work_dir_keeps_its_datasets_across_a_restart(tmp_path):
    work_dir = str(tmp_path / "journal")
    d = sluice.DispatchServer(work_dir=work_dir)
    port = int(d.address.rsplit(":", 1)[1])
    dataset_id = sluice.register_dataset(d.target, sluice.Dataset.range(7))
    d.stop()
    # The same port and work_dir: the registry comes back from the journal.
    with sluice.DispatchServer(port=port, work_dir=work_dir) as again:
        with sluice.WorkerServer(again.target):
            assert ints(sluice.from_dataset_id("dynamic", again.target, dataset_id)) == list(range(7))
    # Without a work_dir nothing survives: a new in-memory dispatcher does not know it.
    with sluice.DispatchServer() as memory:
        with pytest.raises(sluice.NotFoundError):
            iter(sluice.from_dataset_id("dynamic", memory.target, dataset_id))


def test_a_quorum_of_three_serves_reads_and_survives_losing_a_node(tmp_path):
    with sluice.start_quorum(3, work_dir=str(tmp_path)) as quorum:
        assert len(quorum.addresses) == 3
        with sluice.WorkerServer(quorum), sluice.WorkerServer(quorum.target):
            ds = sluice.Dataset.range(40)
            assert ints(ds.distribute("dynamic", quorum)) == list(range(40))
            # Any one node may go: the other two elect a leader and go on.
            quorum.nodes[0].stop()
            assert ints(ds.distribute("dynamic", quorum, job_name="after")) == list(range(40))


def test_join_waits_for_stop_from_another_thread():
    d = sluice.DispatchServer()
    with pytest.raises(sluice.DeadlineExceededError):
        d.join(timeout=0.2)
    stopper = threading.Thread(target=d.stop)
    stopper.start()
    d.join(timeout=120)  # returns once stopped
    stopper.join()
    d.stop()  # idempotent


def test_bad_server_arguments_are_invalid():
    with pytest.raises(sluice.InvalidArgumentError, match="peers entry"):
        sluice.DispatchServer(peers="1=127.0.0.1:1,nonsense")
    with pytest.raises(sluice.InvalidArgumentError):
        sluice.WorkerServer([])
    with pytest.raises(sluice.InvalidArgumentError, match="seconds"):
        sluice.DispatchServer(worker_timeout=-1)


def test_a_port_in_use_is_unavailable_and_says_so():
    with sluice.DispatchServer() as d:
        port = int(d.address.rsplit(":", 1)[1])
        with pytest.raises(sluice.UnavailableError, match="is the port in use"):
            sluice.DispatchServer(port=port)
