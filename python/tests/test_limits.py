"""A dispatcher's caps from Python: a request beyond one raises
ResourceExhaustedError naming the cap's flag; a bad limit is refused."""

from __future__ import annotations

import pytest

import sluice


def test_a_dispatcher_at_its_dataset_cap_raises_resource_exhausted_naming_the_flag():
    with sluice.DispatchServer(max_datasets=1, finished_job_ttl=60) as d:
        sluice.register_dataset(d.target, sluice.Dataset.range(3), dataset_id="a")
        with pytest.raises(sluice.errors.ResourceExhaustedError, match="--max-datasets 1"):
            sluice.register_dataset(d.target, sluice.Dataset.range(4))
        # The same registration again is no new dataset.
        assert sluice.register_dataset(d.target, sluice.Dataset.range(3), dataset_id="a") == "a"


def test_a_quorum_takes_the_same_limits():
    with sluice.start_quorum(1, max_jobs=1) as quorum:
        with sluice.WorkerServer(quorum):
            ds = sluice.Dataset.range(3)
            assert sorted(int(e) for e in ds.distribute("parallel_epochs", quorum)) == [0, 1, 2]
            with pytest.raises(sluice.errors.ResourceExhaustedError, match="--max-jobs 1"):
                list(ds.distribute("parallel_epochs", quorum))


def test_a_bad_limit_is_refused_naming_it():
    with pytest.raises(sluice.errors.InvalidArgumentError, match="max_clients"):
        sluice.DispatchServer(max_clients=0)
    with pytest.raises(sluice.errors.InvalidArgumentError, match="unknown limit `max_tasks`"):
        sluice.start_quorum(1, max_tasks=3)


def test_dataset_definitions_are_bounded_in_bytes_and_unused_ones_are_forgotten():
    import time

    with sluice.DispatchServer(max_dataset_bytes=4096, unused_dataset_ttl=0.2) as d:
        big = sluice.Dataset.from_tensor_slices(list(range(2000)))
        with pytest.raises(sluice.errors.ResourceExhaustedError, match="--max-dataset-bytes 4096"):
            sluice.register_dataset(d.target, big)
        small = sluice.register_dataset(d.target, sluice.Dataset.range(3), dataset_id="small")
        assert [ds["dataset_id"] for ds in sluice.status(d.target)["datasets"]] == [small]
        # Unused (no job over it): forgotten after the TTL.
        deadline = time.monotonic() + 30
        while sluice.status(d.target)["datasets"]:
            assert time.monotonic() < deadline, "the unused dataset was not forgotten"
            time.sleep(0.05)
        with pytest.raises(sluice.errors.NotFoundError, match="small"):
            list(sluice.from_dataset_id("parallel_epochs", d.target, dataset_id=small))
