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
